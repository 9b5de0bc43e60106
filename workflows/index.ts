// Every workflow the worker runs. The worker bundles this file.
export { leaseWorkflow } from './lease/lease';
export { selfCheckWorkflow } from './selfcheck/selfcheck';
