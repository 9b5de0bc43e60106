/** Every workflow the worker runs (it bundles this file). The API imports only each workflow's messages.ts. */
export { leaseWorkflow } from './lease/lease';
export { selfCheckWorkflow } from './selfcheck/selfcheck';
export { hostMonitorWorkflow } from './host-monitor/monitor';
export { maintenanceWindowWorkflow } from './maintenance/window';
export { noticeWorkflow } from './notices/notice';
export { offerHoldWorkflow } from './offer-hold/hold';
export { powerPlannerWorkflow } from './power-planner/planner';
