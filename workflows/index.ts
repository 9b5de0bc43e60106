// Every workflow the worker runs. The worker bundles this file.
export { selfCheckWorkflow } from './selfcheck';
