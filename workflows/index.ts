// Every workflow the worker runs. The worker bundles this file.
export { leaseWorkflow } from './lease';
export { selfCheckWorkflow } from './selfcheck';
