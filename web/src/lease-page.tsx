/**
 * One lease: its reservations and hosts, its events as a timeline, its status reason, and the
 * changes a lessee makes (extend, shorten, end now, delete) through the API. The possible extensions
 * (GET /v1/leases/{id}/extension-offers) are listed, and a refusal is shown with the offers it
 * carries (for an extension, the ends possible), each applied with one click.
 */
import { useEffect, useState } from 'preact/hooks';
import { ApiFailure, call, fetchLease, hostsOfLease, offersOf, parseDate, type Credentials, type Lease, type Offer } from './api';
import { formatRequestDate } from '../../src/domain/dates';
import { formatDuration, formatRange, formatWhen } from './time';

const EVENT_NAMES: Record<string, string> = { start_lease: 'Start', before_end_lease: 'Before the end', end_lease: 'End' };
/** Statuses a lease leaves by itself: the page asks again until it settles. */
const MOVING = new Set(['STARTING', 'TERMINATING', 'DELETING']);

/**
 * The latest end a refused change offers: an active lease's `latest_end`, or for a pending one the
 * `longest_end` from its start (both "YYYY-MM-DD HH:MM", UTC).
 */
export function latestPossibleEnd(err: ApiFailure): string | undefined {
  if (err.status !== 409) return undefined;
  const end = err.body.latest_end ?? err.body.longest_end;
  return typeof end === 'string' ? end : undefined;
}

/** A datetime-local value ("2026-11-24T18:00") from epoch ms, in UTC. */
const localValue = (ms: number) => new Date(ms).toISOString().slice(0, 16);

export function LeasePage(props: { credentials: Credentials; leaseId: string }) {
  const [lease, setLease] = useState<Lease>();
  const [hosts, setHosts] = useState<string[]>([]);
  const [problem, setProblem] = useState<string>();
  const [outcome, setOutcome] = useState<{ kind: 'error' | 'info'; text: string; suggestion?: string; offers?: Offer[] }>();
  const [extensions, setExtensions] = useState<{ offers: Offer[]; note?: string }>();
  const [newEnd, setNewEnd] = useState('');
  const [busy, setBusy] = useState(false);
  const [refresh, setRefresh] = useState(0);

  useEffect(() => {
    let stopped = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const load = async () => {
      try {
        const found = await fetchLease(props.credentials, props.leaseId);
        if (stopped) return;
        setLease(found);
        setProblem(undefined);
        setNewEnd((current) => current || localValue(parseDate(found.end_date)));
        setHosts(await hostsOfLease(props.credentials, props.leaseId).catch(() => []));
        // What an extension could be now: only worth asking while the lease can change.
        const extendable = found.status === 'PENDING' || found.status === 'ACTIVE';
        const possible = extendable ? await call<{ offers: Offer[]; note?: string }>(props.credentials, 'GET', `/v1/leases/${encodeURIComponent(props.leaseId)}/extension-offers`).catch(() => undefined) : undefined;
        if (!stopped) setExtensions(possible);
        if (MOVING.has(found.status)) timer = setTimeout(() => void load(), 2000);
      } catch (err) {
        if (!stopped) setProblem(err instanceof ApiFailure ? err.message : String(err));
      }
    };
    void load();
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }, [props.leaseId, props.credentials, refresh]);

  async function change(what: string, body: Record<string, unknown> | undefined) {
    setBusy(true);
    setOutcome(undefined);
    try {
      if (body) await call(props.credentials, 'PUT', `/v1/leases/${props.leaseId}`, body);
      else await call(props.credentials, 'DELETE', `/v1/leases/${props.leaseId}`);
      setOutcome({ kind: 'info', text: `${what}: done.` });
      if (!body) {
        location.hash = '#/';
        return;
      }
      setNewEnd('');
      setRefresh((n) => n + 1);
    } catch (err) {
      const text = err instanceof ApiFailure ? err.message : String(err);
      const offers = offersOf(err);
      if (offers && offers.length > 0) setOutcome({ kind: 'error', text, offers });
      else setOutcome({ kind: 'error', text, suggestion: err instanceof ApiFailure ? latestPossibleEnd(err) : undefined });
    } finally {
      setBusy(false);
    }
  }

  /** An admin approves or denies the waiting lease, with a reason (a Keystone token's roles are the API's to judge: a member's answer is refused in words). */
  async function answer(outcome: 'approve' | 'deny', reason: string) {
    setBusy(true);
    setOutcome(undefined);
    try {
      await call(props.credentials, 'POST', `/v1/leases/${props.leaseId}/${outcome}`, reason.trim() ? { reason: reason.trim() } : {});
      setOutcome({ kind: 'info', text: `${outcome === 'approve' ? 'Approved' : 'Denied'}: done.` });
      setRefresh((n) => n + 1);
    } catch (err) {
      setOutcome({ kind: 'error', text: err instanceof ApiFailure ? err.message : String(err) });
    } finally {
      setBusy(false);
    }
  }

  if (problem) {
    return (
      <section aria-label="Lease">
        <p role="alert" class="error">
          {problem}
        </p>
        <a href="#/">Back to the calendar</a>
      </section>
    );
  }
  if (!lease) return <p>Loading the lease…</p>;
  const startMs = parseDate(lease.start_date);
  const endMs = parseDate(lease.end_date);
  const finished = ['TERMINATED', 'DELETING'].includes(lease.status);
  return (
    <article class="lease" aria-label={`Lease ${lease.name}`}>
      <p>
        <a href="#/">← Calendar</a>
      </p>
      <h2>
        {lease.name} <span class={`badge status-${lease.status}`}>{lease.status}</span>
        {lease.degraded && <span class="badge degraded">degraded</span>}
      </h2>
      <dl class="facts">
        <dt>Window</dt>
        <dd>
          {formatWhen(startMs)} → {formatWhen(endMs)} ({formatDuration(endMs - startMs)})
        </dd>
        <dt>Project</dt>
        <dd>{lease.project_id}</dd>
        <dt>Lease id</dt>
        <dd>
          <code>{lease.id}</code>
        </dd>
        {lease.status_reason && (
          <>
            <dt>Status reason</dt>
            <dd class="reason">{lease.status_reason}</dd>
          </>
        )}
        {lease.approval && (
          <>
            <dt>Approval</dt>
            <dd class="reason">
              {lease.approval.kind === 'exception' ? `An exception to ${lease.approval.rule}` : 'Needs approval'}: {lease.approval.reason}
              {lease.approval.justification && <> · justification: “{lease.approval.justification}”</>}
              {lease.approval.outcome ? ` · ${lease.approval.outcome}${lease.approval.answer_reason ? `: ${lease.approval.answer_reason}` : ''}` : ` · without an answer by ${lease.approval.timeout_at} UTC it is ${lease.approval.on_timeout === 'approve' ? 'approved' : 'denied'}`}
            </dd>
          </>
        )}
        {lease.pending_change && (
          <>
            <dt>Change waiting</dt>
            <dd class="reason">
              New end {lease.pending_change.end_date} UTC, an exception to {lease.pending_change.rule}: {lease.pending_change.reason}
              {lease.pending_change.justification && <> · justification: “{lease.pending_change.justification}”</>}
              {` · without an answer by ${lease.pending_change.timeout_at} UTC it is ${lease.pending_change.on_timeout === 'approve' ? 'approved' : 'denied'}`}
            </dd>
          </>
        )}
        {hosts.length > 0 && (
          <>
            <dt>Hosts</dt>
            <dd>{hosts.join(', ')}</dd>
          </>
        )}
      </dl>
      <h3>Events</h3>
      <ol class="events" aria-label="Events">
        {[...lease.events]
          .sort((a, b) => parseDate(a.time) - parseDate(b.time))
          .map((e) => (
            <li key={e.event_type} class={`event-${e.status}`}>
              <strong>{EVENT_NAMES[e.event_type] ?? e.event_type}</strong> {formatWhen(parseDate(e.time))} <span class="badge">{e.status}</span>
            </li>
          ))}
      </ol>
      <h3>Reservations</h3>
      <table class="reservations">
        <thead>
          <tr>
            <th scope="col">Type</th>
            <th scope="col">Status</th>
            <th scope="col">Parameters</th>
          </tr>
        </thead>
        <tbody>
          {lease.reservations.map((r) => (
            <tr key={r.id}>
              <td>{r.resource_type}</td>
              <td>{r.status}</td>
              <td>
                <code>{parameters(r)}</code>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {(lease.status === 'PENDING_APPROVAL' || (lease.pending_change && !lease.pending_change.outcome)) && (props.credentials.kind === 'token' || props.credentials.admin) && <ApprovalForm busy={busy} answer={(outcome, reason) => void answer(outcome, reason)} />}
      {!finished && (
        <section aria-label="Change the lease" class="changes">
          <h3>Change</h3>
          <form
            onSubmit={(e) => {
              e.preventDefault();
              void change('New end', { end_date: formatRequestDate(parseDate(newEnd)) });
            }}
          >
            <label>
              End (UTC) <input name="end_date" type="datetime-local" value={newEnd} required onInput={(e) => setNewEnd(e.currentTarget.value)} />
            </label>
            <button type="submit" disabled={busy}>
              Change the end
            </button>
          </form>
          <div class="buttons">
            <button type="button" disabled={busy} onClick={() => void change('Extended by 1 h', { end_date: formatRequestDate(endMs + 3_600_000) })}>
              Extend 1 h
            </button>
            <button type="button" disabled={busy || endMs - 3_600_000 <= Math.max(startMs, Date.now())} onClick={() => void change('Shortened by 1 h', { end_date: formatRequestDate(endMs - 3_600_000) })}>
              Shorten 1 h
            </button>
            {lease.status === 'ACTIVE' && (
              <button type="button" disabled={busy} onClick={() => void change('Ended', { end_date: 'now' })}>
                End now
              </button>
            )}
            <button type="button" class="danger" disabled={busy} onClick={() => confirm(`Delete lease ${lease.name}?`) && void change('Deleted', undefined)}>
              Delete
            </button>
          </div>
          {extensions && (
            <>
              <h4>Possible extensions</h4>
              {extensions.offers.length > 0 ? <OfferChoices label="Possible extensions" offers={extensions.offers} lease={lease} busy={busy} apply={(what, body) => void change(what, body)} /> : <p>{extensions.note ?? 'None now.'}</p>}
            </>
          )}
        </section>
      )}
      {outcome && (
        <div role={outcome.kind === 'error' ? 'alert' : 'status'} class={outcome.kind}>
          <p>{outcome.text}</p>
          {outcome.offers && (
            <>
              <p class="suggestion">What would work instead:</p>
              <OfferChoices label="What would work" offers={outcome.offers} lease={lease} busy={busy} apply={(what, body) => void change(what, body)} />
            </>
          )}
          {outcome.suggestion && (
            <p class="suggestion">
              It can be extended until <strong>{outcome.suggestion} UTC</strong>.{' '}
              <button type="button" disabled={busy} onClick={() => void change(`Extended until ${outcome.suggestion}`, { end_date: outcome.suggestion })}>
                Extend until then
              </button>
            </p>
          )}
        </div>
      )}
    </article>
  );
}

/** Approve and Deny, for admins, with a reason kept on the lease (and told to the lessee). */
function ApprovalForm(props: { busy: boolean; answer(outcome: 'approve' | 'deny', reason: string): void }) {
  const [reason, setReason] = useState('');
  return (
    <section aria-label="Approval" class="changes">
      <h3>Approval</h3>
      <label>
        Reason <input name="approval_reason" maxLength={1000} value={reason} onInput={(e) => setReason(e.currentTarget.value)} />
      </label>
      <div class="buttons">
        <button type="button" disabled={props.busy} onClick={() => props.answer('approve', reason)}>
          Approve
        </button>
        <button type="button" class="danger" disabled={props.busy} onClick={() => props.answer('deny', reason)}>
          Deny
        </button>
      </div>
    </section>
  );
}

/** Offers for this lease, each applied with one click: an end to PUT (an extension keeps the start), or a new window. */
function OfferChoices(props: { label: string; offers: Offer[]; lease: Lease; busy: boolean; apply(what: string, body: Record<string, unknown>): void }) {
  const startMs = parseDate(props.lease.start_date);
  const endMs = parseDate(props.lease.end_date);
  return (
    <ul class="offers" aria-label={props.label}>
      {props.offers.map((o) => {
        const offerStart = parseDate(o.start_date);
        const offerEnd = parseDate(o.end_date);
        const keepsStart = offerStart === startMs;
        const [button, done, body] = keepsStart
          ? [`${offerEnd > endMs ? 'Extend until' : 'End at'} ${o.end_date}`, `${offerEnd > endMs ? 'Extended until' : 'Ended at'} ${o.end_date}`, { end_date: o.end_date }]
          : [`Move to ${o.start_date} → ${o.end_date}`, `Moved to ${o.start_date} → ${o.end_date}`, { start_date: o.start_date, end_date: o.end_date }];
        return (
          <li key={o.id}>
            {keepsStart ? `until ${formatWhen(offerEnd)} (${offerEnd >= endMs ? '+' : '−'}${formatDuration(Math.abs(offerEnd - endMs))})` : `${formatRange(offerStart, offerEnd)} (${formatDuration(offerEnd - offerStart)})`}{' '}
            <span class="offer-reason">· {o.reason}</span>{' '}
            <button type="button" disabled={props.busy} onClick={() => props.apply(done, body)}>
              {button}
            </button>
          </li>
        );
      })}
    </ul>
  );
}

function parameters(r: Record<string, unknown>): string {
  const skip = new Set(['id', 'lease_id', 'resource_type', 'status', 'created_at', 'updated_at', 'missing_resources', 'resources_changed']);
  return Object.entries(r)
    .filter(([k, v]) => !skip.has(k) && v !== '' && v !== null && v !== undefined)
    .map(([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`)
    .join(' ');
}
