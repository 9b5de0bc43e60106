/** What the API needs to run the deep health check's workflow (workflows/selfcheck/selfcheck.ts). */

export const selfCheckWorkflowType = 'selfCheckWorkflow';

export interface SelfCheckResult {
  schemaVersion: number;
  taskQueue: string;
}
