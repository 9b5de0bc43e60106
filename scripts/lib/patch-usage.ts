/**
 * Which workflow patches can go (`npm run patches`): for each patch in workflows/patches.ts, how
 * many workflows of its type still run that started before it came into the code, counted by
 * Temporal's visibility. While that number is not 0 the patch's old branch may still be taken.
 */
import type { Client } from '@temporalio/client';
import { PATCHES, type WorkflowPatch } from '../../workflows/patches';

export interface PatchUsage {
  patch: WorkflowPatch;
  /** Started before this instant: the end of the day the patch came in (a workflow started that day may predate the deploy). */
  startedBefore: Date;
  /** Workflows of the patch's type still running that started before then. */
  running: number;
}

/** The end of the patch's day (UTC): its date is when it came into the code, and a deploy that day may come after a start. */
export function patchCutoff(patch: Pick<WorkflowPatch, 'introduced'>): Date {
  return new Date(Date.parse(`${patch.introduced}T00:00:00Z`) + 24 * 3600_000);
}

/** Running workflows of `workflowType` that started before `before`, by a visibility count. */
export async function countRunningStartedBefore(client: Client, workflowType: string, before: Date): Promise<number> {
  const query = `WorkflowType = '${workflowType}' AND ExecutionStatus = 'Running' AND StartTime < '${before.toISOString()}'`;
  const { count } = await client.workflow.count(query);
  return count;
}

/** Each patch with the workflows that may still take its old branch (one count per distinct type and cutoff). */
export async function patchUsage(client: Client, patches: readonly WorkflowPatch[] = PATCHES): Promise<PatchUsage[]> {
  const counted = new Map<string, number>();
  const usage: PatchUsage[] = [];
  for (const patch of patches) {
    const startedBefore = patchCutoff(patch);
    const key = `${patch.workflowType} ${startedBefore.toISOString()}`;
    if (!counted.has(key)) counted.set(key, await countRunningStartedBefore(client, patch.workflowType, startedBefore));
    usage.push({ patch, startedBefore, running: counted.get(key)! });
  }
  return usage;
}
