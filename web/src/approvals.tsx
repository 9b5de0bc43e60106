/**
 * Leases waiting for approval (issue 42), and active leases whose change waits, above the calendar:
 * for an admin every project's, to open and answer (Approve, Deny on the lease's page); for a member their own project's. Hidden
 * when there are none.
 */
import { useEffect, useState } from 'preact/hooks';
import { call, parseDate, type Credentials, type Lease } from './api';
import { formatRange } from './time';

/** At most this many are listed (the API's `limit`): the oldest asks first. */
const LISTED = 50;

export function WaitingForApproval(props: { credentials: Credentials }) {
  const [waiting, setWaiting] = useState<Lease[]>([]);
  useEffect(() => {
    let stopped = false;
    call<{ leases: Lease[] }>(props.credentials, 'GET', `/v1/leases?awaiting_approval=true&limit=${LISTED}`).then(
      (answer) => !stopped && setWaiting(answer.leases),
      () => !stopped && setWaiting([]),
    );
    return () => {
      stopped = true;
    };
  }, [props.credentials]);
  if (waiting.length === 0) return null;
  return (
    <section aria-label="Waiting for approval" class="approvals">
      <h2>Waiting for approval</h2>
      <ul>
        {waiting.map((l) => (
          <li key={l.id}>
            <a href={`#/leases/${l.id}`}>{l.name}</a>{' '}
            {l.pending_change ? (
              <>
                <span class="badge status-PENDING_APPROVAL">change waiting</span> {l.project_id} · {formatRange(parseDate(l.start_date), parseDate(l.end_date))} → new end {l.pending_change.end_date} UTC
                <span class="offer-reason"> · exception to {l.pending_change.rule}</span>
              </>
            ) : (
              <>
                <span class="badge status-PENDING_APPROVAL">PENDING_APPROVAL</span> {l.project_id} · {formatRange(parseDate(l.start_date), parseDate(l.end_date))}
                {l.approval && <span class="offer-reason"> · {l.approval.kind === 'exception' ? `exception to ${l.approval.rule}` : l.approval.rule}</span>}
              </>
            )}
          </li>
        ))}
      </ul>
    </section>
  );
}
