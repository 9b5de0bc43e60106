/**
 * The usage policy of a project (an extension): `GET /v1/projects/{id}/policy` shows the rules in
 * force and where each layer comes from (members: their own project); `PUT` sets the project's
 * rules over the deployment's (admins); `DELETE` removes them. The rules are checked as leases are
 * admitted and changed (src/policy/enforcement.ts). A PUT with an allocation end in force ends the
 * project's leases past it (src/api/allocation-end.ts) before it answers, and says which it could not.
 */
import { Router, type Response } from 'express';
import { deleteProjectRules, projectRules, saveProjectRules } from '../db/usage-policy';
import type { Pool } from '../db/pool';
import type { UsagePolicyEnforcer } from '../policy/enforcement';
import { allocationEndMs, rulesSchema } from '../policy/rules';
import { endLeasesPastAllocation, workflowEnders } from './allocation-end';
import type { LeaseCommandOptions } from './lease-commands';
import { identityOf, projectInScope } from './auth';
import { formatBlazarTimestamp } from '../domain/dates';
import { ApiError, parseRequest } from './errors';

export const projectPolicyBody = rulesSchema;

const projectIdOf = (res: Response, raw: string, action: 'get' | 'put' | 'delete'): string =>
  projectInScope(res, raw, `blazar:projects:policy:${action}`, { adminOnly: action !== 'get', ownOnly: "members see their own project's policy only" });

export function projectPolicyRouter(deps: { pool: Pool; policy: UsagePolicyEnforcer; commands?: LeaseCommandOptions }): Router {
  const router = Router();

  async function shown(projectId: string) {
    const stored = await projectRules(deps.pool, projectId);
    const { effective, layers } = await deps.policy.rulesFor(deps.pool, projectId);
    return {
      policy: {
        project_id: projectId,
        effective,
        deployment: layers.deployment,
        project_file: layers.projectFile ?? null,
        project: stored?.rules ?? null,
        updated_at: stored ? formatBlazarTimestamp(Date.parse(stored.updatedAt)) : null,
        updated_by: stored?.updatedBy ?? null,
      },
    };
  }

  router.get('/projects/:projectId/policy', async (req, res) => {
    res.json(await shown(projectIdOf(res, req.params.projectId, 'get')));
  });

  router.put('/projects/:projectId/policy', async (req, res) => {
    const projectId = projectIdOf(res, req.params.projectId, 'put');
    const rules = parseRequest(projectPolicyBody, req.body ?? {});
    await saveProjectRules(deps.pool, projectId, rules, identityOf(res).userId);
    // An allocation end in force: the project's leases past it are ended (deleted or shortened) before the answer.
    const { effective } = await deps.policy.rulesFor(deps.pool, projectId);
    const allocationEnd = effective.allocation_end;
    // Preemptible leases the policy exempts from allocation_end keep their end, as admission lets them.
    const preemptibleExempt = effective.preemptible_exempt?.includes('allocation_end') ?? false;
    // Within about the API's own timeout: what is left (failed, or not reached) is listed, and a repeat of the PUT goes on with it.
    const ended =
      allocationEnd && deps.commands
        ? await endLeasesPastAllocation({ pool: deps.pool, enders: workflowEnders({ pool: deps.pool, commands: deps.commands }) }, projectId, allocationEndMs(allocationEnd), deps.commands.timeoutMs, preemptibleExempt)
        : undefined;
    const allocationEndAnswer = ended && {
      deleted_leases: ended.deleted,
      shortened_leases: ended.shortened,
      failed_leases: ended.failed,
      remaining_leases: ended.remaining,
      complete: ended.failed.length === 0 && ended.remaining === 0,
    };
    res.json({ ...(await shown(projectId)), ...(allocationEndAnswer ? { allocation_end: allocationEndAnswer } : {}) });
  });

  router.delete('/projects/:projectId/policy', async (req, res) => {
    const projectId = projectIdOf(res, req.params.projectId, 'delete');
    if (!(await deleteProjectRules(deps.pool, projectId))) throw new ApiError(404, `project ${projectId} has no policy of its own`);
    res.status(204).end();
  });

  return router;
}
