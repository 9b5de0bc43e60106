/**
 * Crash safety with the real worker process: kill -9 it while a lease is pending and while it is
 * active, start it again, and the lease carries on from where it was.
 */
import type { ManagedProcess } from '../dev-stack/processes';
import { leaseWorkflowId } from '../workflows/lease/messages';
import { apiClient, eventually, inSeconds, untilTimersFired, untilWaitingOnTimer, useTestStack, withLeaseHistory } from '../dev-stack/stack';
import { startWorkerProcess } from '../dev-stack/worker-process';

describe('worker killed with -9 mid-lease', () => {
  let worker: ManagedProcess | undefined;
  // Only the real worker process runs this lease.
  const stack = useTestStack({ noWorker: true }, { beforeStop: async () => worker?.stop() });

  const startWorker = () => startWorkerProcess(stack());

  /** On a time-out, the lease's history and the worker's last lines. */
  const explain = (id: string) => (err: Error) => withLeaseHistory(stack(), id, err, `worker:\n${worker?.tail() ?? ''}`);

  function killHard(proc: ManagedProcess): Promise<number | null> {
    proc.child.kill('SIGKILL');
    return proc.exited;
  }

  it('continues the lease after each crash and restart', async () => {
    const api = apiClient(stack().url);
    const status = async (id: string) => (await api('GET', `/v1/leases/${id}`)).body.lease.status as string;

    worker = await startWorker();
    const { body } = await api('POST', '/v1/leases', { name: 'survivor', start_date: inSeconds(4), end_date: inSeconds(35) });
    const id = body.lease.id;
    await untilWaitingOnTimer(stack(), id).catch(explain(id)); // waiting for its start
    await killHard(worker);

    await untilTimersFired(stack(), id).catch(explain(id)); // the start has passed with no worker
    expect(await status(id)).toBe('PENDING');

    worker = await startWorker();
    let restarted = Date.now();
    await eventually(async () => ((await status(id)) === 'ACTIVE' ? true : undefined), 60_000).catch(explain(id));
    const startRecovery = Date.now() - restarted;
    await untilWaitingOnTimer(stack(), id).catch(explain(id)); // waiting for its end
    await killHard(worker);

    await untilTimersFired(stack(), id).catch(explain(id));
    expect(await status(id)).toBe('ACTIVE'); // the end is due, but nobody runs it yet

    worker = await startWorker();
    restarted = Date.now();
    await eventually(async () => ((await status(id)) === 'TERMINATED' ? true : undefined), 60_000).catch(explain(id));
    // A task held by the dead worker's sticky queue moves to the shared queue after its schedule-to-start timeout (10 s).
    console.log(`after restart: started in ${startRecovery} ms, ended in ${Date.now() - restarted} ms`);
    const lease = (await api('GET', `/v1/leases/${id}`)).body.lease;
    expect(lease.events.map((e: { status: string }) => e.status)).toEqual(['DONE', 'DONE', 'DONE']);

    const description = await stack().temporal.client.workflow.getHandle(leaseWorkflowId(id)).describe();
    expect(description.status.name).toBe('RUNNING'); // still there to rename or delete the ended lease
  }, 180_000);
});
