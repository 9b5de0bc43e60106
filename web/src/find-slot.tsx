/**
 * "When can I get what I need?": hosts (how many, which properties), instance slots of a size, or
 * bandwidth, for how long, from when, and what the user accepts instead (fewer, shorter) → the
 * API's offers (POST /v1/offers, best first), each with its kind and reason, drawn as ghost bars,
 * and the usage policy's dry run of the lease as asked (POST /v1/policy/check): a line per rule it breaks,
 * and one when it would wait for an admin's approval.
 * An offer is booked (accept) or held for a few minutes (hosts), with a countdown to the hold's end.
 */
import { useEffect, useState } from 'preact/hooks';
import { ApiFailure, call, offersOf, parseDate, type CalendarBooking, type CalendarWindow, type Credentials, type Offer, type OfferHold } from './api';
import { formatRequestDate } from '../../src/domain/dates';
import type { Ghost } from './paint';
import { formatCountdown, formatDuration, formatRange } from './time';

type Want = 'hosts' | 'instances' | 'bandwidth';

/** How many offers to ask for. */
const OFFERS = 5;

/** An offer's kind in words: what the user gives up. */
export const KIND_WORDS: Record<Offer['kind'], string> = { exact: 'as asked', later: 'later', shorter: 'shorter', fewer: 'fewer', extension: 'extension' };

/** Hosts free over the whole window in the loaded calendar: where a ghost bar shows the booking could land. */
function freeHosts(calendar: CalendarWindow | undefined, byHost: Map<string, CalendarBooking[]>, startMs: number, endMs: number, count: number): Set<string> | null {
  if (!calendar) return null;
  const free = calendar.hosts.filter((h) => !(byHost.get(h.id) ?? []).some((b) => b.start_ms < endMs && startMs < b.end_ms));
  return new Set(free.slice(0, count).map((h) => h.id));
}

/** What an offer books, in words: "2 hosts", "4 instances, 1 addresses". */
export function offerBooks(offer: Pick<Offer, 'reservations'>): string {
  return offer.reservations
    .flatMap((r) => Object.entries(r).filter(([key, value]) => key !== 'resource_type' && typeof value === 'number'))
    .map(([key, value]) => `${String(value)} ${key.replace(/_/g, ' ')}`)
    .join(', ');
}

/** The record without one key. */
const without = <T,>(record: Record<string, T>, key: string) => Object.fromEntries(Object.entries(record).filter(([k]) => k !== key));

/** A refusal in words: what refused it (unless the API's own message names it), then that message. */
function refusalText(err: unknown): string {
  if (!(err instanceof ApiFailure)) return String(err);
  const reason = typeof err.body.reason === 'string' ? err.body.reason : '';
  const rule = reason.startsWith('policy:') ? reason.slice('policy:'.length) : undefined;
  const why = reason === 'capacity' ? 'Taken meanwhile' : reason === 'maintenance' ? 'Maintenance' : reason === 'failed_hosts' ? 'Hosts failed' : rule && !err.message.includes(rule) ? `The usage policy refuses it (${rule})` : undefined;
  return why ? `${why}: ${err.message}` : err.message;
}

/** Time left on a hold, ticking each second by the page's clock; "expired" once it is over. */
function Countdown(props: { untilMs: number }) {
  const [, tick] = useState(0);
  const left = props.untilMs - Date.now();
  useEffect(() => {
    if (left <= 0) return undefined;
    const timer = setInterval(() => tick((n) => n + 1), 1000);
    return () => clearInterval(timer);
  }, [left <= 0]);
  if (left <= 0) return <span class="hold-expired">the hold expired: Book asks again</span>;
  return (
    <span class="hold-left">
      held for{' '}
      <span role="timer" aria-label="Hold time left">
        {formatCountdown(left)}
      </span>
    </span>
  );
}

export function FindSlot(props: {
  credentials: Credentials;
  calendar?: CalendarWindow;
  byHost: Map<string, CalendarBooking[]>;
  onGhosts(ghosts: Ghost[]): void;
  /** A booking or hold was made or ended: the calendar loads again. */
  onCalendarChanged(): void;
}) {
  const [want, setWant] = useState<Want>('hosts');
  const [count, setCount] = useState(1);
  const [fewest, setFewest] = useState<number>(NaN);
  const [properties, setProperties] = useState('');
  const [vcpus, setVcpus] = useState(2);
  const [memoryMb, setMemoryMb] = useState(2048);
  const [diskGb, setDiskGb] = useState(10);
  const [networkId, setNetworkId] = useState('');
  const [egressKbps, setEgressKbps] = useState(100_000);
  const [hours, setHours] = useState(2);
  const [shortestHours, setShortestHours] = useState<number>(NaN);
  const [earliest, setEarliest] = useState('');
  const [name, setName] = useState('');
  const [offers, setOffers] = useState<Offer[]>();
  /** The offers this page holds, by offer id: until when. */
  const [holds, setHolds] = useState<Record<string, number>>({});
  const [message, setMessage] = useState<{ kind: 'error' | 'info'; text: string }>();
  /** The usage policy's rules the asked lease would break (POST /v1/policy/check), one line each. */
  const [policyLines, setPolicyLines] = useState<string[]>([]);
  const [busy, setBusy] = useState(false);

  const reservation = (): Record<string, unknown> => {
    const min = Number.isInteger(fewest) && fewest >= 1 && fewest < count ? fewest : undefined;
    if (want === 'hosts') return { resource_type: 'physical:host', min: min ?? count, max: count, hypervisor_properties: '', resource_properties: properties.trim() };
    if (want === 'instances') return { resource_type: 'virtual:instance', vcpus, memory_mb: memoryMb, disk_gb: diskGb, amount: count, affinity: false, ...(min ? { min } : {}) };
    return { resource_type: 'network:bandwidth', network_id: networkId.trim(), egress_kbps: egressKbps, amount: count, ...(min ? { min } : {}) };
  };

  const liveHeld = (list: Offer[]) => list.filter((o) => holds[o.id] !== undefined && holds[o.id] > Date.now());

  /** Lists these offers and draws the ones not held as ghost bars (a held one is on the calendar already). */
  function show(list: Offer[], held = holds) {
    setOffers(list);
    props.onGhosts(
      list
        .map((o, i) => ({ o, label: `offer ${i + 1}` }))
        .filter(({ o }) => held[o.id] === undefined)
        .map(({ o, label }) => {
          const startMs = parseDate(o.start_date);
          const endMs = parseDate(o.end_date);
          const hosts = o.reservations.find((r) => r.resource_type === 'physical:host')?.hosts;
          return { startMs, endMs, hostIds: typeof hosts === 'number' ? freeHosts(props.calendar, props.byHost, startMs, endMs, hosts) : null, label };
        }),
    );
  }

  /** A refusal: its words, and its fresh offers (if any) in place of the listed ones, after those still held. */
  function refused(err: unknown, current: Offer[]) {
    const fresh = offersOf(err) ?? [];
    setMessage({ kind: 'error', text: fresh.length > 0 ? `${refusalText(err)} What fits now is listed below.` : refusalText(err) });
    if (fresh.length > 0) show([...liveHeld(current), ...fresh]);
  }

  async function search(event: Event) {
    event.preventDefault();
    setBusy(true);
    setMessage(undefined);
    setOffers(undefined);
    setPolicyLines([]);
    props.onGhosts([]);
    const minutes = Math.round(hours * 60);
    const shortest = Math.round(shortestHours * 60);
    try {
      const answer = await call<{ offers: Offer[]; note?: string }>(props.credentials, 'POST', '/v1/offers', {
        reservations: [reservation()],
        duration: minutes,
        ...(earliest ? { start_after: formatRequestDate(parseDate(earliest)) } : {}),
        ...(shortest >= 1 && shortest < minutes ? { min_duration: shortest } : {}),
        limit: OFFERS,
      });
      if (answer.offers.length === 0) setMessage({ kind: 'info', text: answer.note ?? 'Nothing fits: fewer hosts, a shorter window or other properties may.' });
      else if (answer.note) setMessage({ kind: 'info', text: answer.note });
      show(answer.offers);
      setPolicyLines(await policyCheck(minutes));
    } catch (err) {
      refused(err, []);
    } finally {
      setBusy(false);
    }
  }

  /**
   * The usage policy's dry run of the lease as asked (from the earliest start, or now): a short line
   * per rule it would break, before anything is booked. Advisory: a check that fails shows nothing.
   */
  async function policyCheck(minutes: number): Promise<string[]> {
    const startMs = earliest ? parseDate(earliest) : Date.now();
    try {
      const answer = await call<{ decision: string; rules: Array<{ rule: string; ok: boolean; limit: number | string | null; value: number | string | null }>; approval?: { rule: string } }>(props.credentials, 'POST', '/v1/policy/check', {
        name: name.trim() || 'find-a-slot',
        start_date: earliest ? formatRequestDate(startMs) : 'now',
        end_date: formatRequestDate(startMs + minutes * 60_000),
        reservations: [reservation()],
      });
      const broken = answer.rules.filter((r) => !r.ok).map((r) => `The usage policy refuses it as asked: ${r.rule}: ${r.value === null ? 'over' : `would be ${r.value}`}${r.limit === null ? '' : `, limit ${r.limit}`}`);
      return answer.decision === 'approval' && answer.approval ? [...broken, `The lease as asked needs an admin's approval (rule ${answer.approval.rule}).`] : broken;
    } catch {
      return [];
    }
  }

  async function book(offer: Offer) {
    const list = offers ?? [];
    setBusy(true);
    setMessage(undefined);
    try {
      const leaseName = name.trim() || `calendar-${offer.start_date.replace(/[ :]/g, '-')}`;
      const answer = await call<{ lease: { id: string; name: string } }>(props.credentials, 'POST', `/v1/offers/${offer.id}/accept`, { name: leaseName });
      setMessage({ kind: 'info', text: `Booked lease ${answer.lease.name} for ${formatRange(parseDate(offer.start_date), parseDate(offer.end_date))}.` });
      setHolds(without(holds, offer.id));
      const stillHeld = liveHeld(list).filter((o) => o.id !== offer.id);
      setOffers(stillHeld.length > 0 ? stillHeld : undefined);
      props.onGhosts([]);
      props.onCalendarChanged();
    } catch (err) {
      refused(err, list);
    } finally {
      setBusy(false);
    }
  }

  async function hold(offer: Offer) {
    const list = offers ?? [];
    setBusy(true);
    setMessage(undefined);
    try {
      const answer = await call<{ hold: OfferHold }>(props.credentials, 'POST', `/v1/offers/${offer.id}/hold`, {});
      const untilMs = Date.parse(answer.hold.expires_at);
      const held = { ...holds, [offer.id]: untilMs };
      setHolds(held);
      show(list, held);
      setMessage({ kind: 'info', text: `Held ${formatRange(parseDate(offer.start_date), parseDate(offer.end_date))} until ${new Date(untilMs).toISOString().slice(11, 19)} UTC: nobody else can book it meanwhile.` });
      props.onCalendarChanged();
    } catch (err) {
      refused(err, list);
    } finally {
      setBusy(false);
    }
  }

  async function release(offer: Offer) {
    setBusy(true);
    setMessage(undefined);
    try {
      await call(props.credentials, 'DELETE', `/v1/offers/${offer.id}/hold`);
      setHolds(without(holds, offer.id));
      setOffers((list) => list?.filter((o) => o.id !== offer.id));
      setMessage({ kind: 'info', text: `Released the hold of ${formatRange(parseDate(offer.start_date), parseDate(offer.end_date))}.` });
      props.onCalendarChanged();
    } catch (err) {
      refused(err, offers ?? []);
    } finally {
      setBusy(false);
    }
  }

  const numberInput = (label: string, field: string, value: number, set: (n: number) => void, min: number, max: number, step = 1, required = true) => (
    <label>
      {label}{' '}
      <input name={field} type="number" min={min} max={max} step={step} value={Number.isNaN(value) ? '' : value} required={required} placeholder={required ? undefined : 'as asked'} onInput={(e) => set(e.currentTarget.valueAsNumber)} />
    </label>
  );

  return (
    <section aria-label="Find a slot" class="find-slot">
      <h2>Find a slot</h2>
      <form onSubmit={(e) => void search(e)} aria-label="What you need">
        <fieldset>
          <legend>I need</legend>
          {(['hosts', 'instances', 'bandwidth'] as Want[]).map((w) => (
            <label key={w}>
              <input type="radio" name="want" value={w} checked={want === w} onChange={() => setWant(w)} /> {w === 'hosts' ? 'whole hosts' : w === 'instances' ? 'servers of a size' : 'network bandwidth'}
            </label>
          ))}
        </fieldset>
        <div class="fields">
          {numberInput(want === 'hosts' ? 'How many hosts' : want === 'instances' ? 'How many servers' : 'How many ports', 'count', count, setCount, 1, want === 'bandwidth' ? 64 : 1000)}
          {numberInput('or at least', 'min', fewest, setFewest, 1, want === 'bandwidth' ? 64 : 1000, 1, false)}
          {want === 'hosts' && (
            <label>
              Properties <input name="properties" value={properties} maxLength={1000} placeholder='["==", "$gpu", "a100"]' onInput={(e) => setProperties(e.currentTarget.value)} />
            </label>
          )}
          {want === 'instances' && (
            <>
              {numberInput('vCPUs', 'vcpus', vcpus, setVcpus, 1, 4096)}
              {numberInput('Memory (MiB)', 'memory_mb', memoryMb, setMemoryMb, 1, 2 ** 31 - 1)}
              {numberInput('Disk (GiB)', 'disk_gb', diskGb, setDiskGb, 0, 2 ** 31 - 1)}
            </>
          )}
          {want === 'bandwidth' && (
            <>
              <label>
                Network id <input name="network_id" value={networkId} required maxLength={36} onInput={(e) => setNetworkId(e.currentTarget.value)} />
              </label>
              {numberInput('Egress (kbps)', 'egress_kbps', egressKbps, setEgressKbps, 1, 100_000_000)}
            </>
          )}
          {numberInput('For (hours)', 'hours', hours, setHours, 0.25, 24 * 366, 0.25)}
          {numberInput('or at least (hours)', 'min_hours', shortestHours, setShortestHours, 0.25, 24 * 366, 0.25, false)}
          <label>
            From (UTC) <input name="earliest" type="datetime-local" value={earliest} onInput={(e) => setEarliest(e.currentTarget.value)} />
          </label>
          <label>
            Lease name <input name="lease_name" value={name} maxLength={80} placeholder="optional" onInput={(e) => setName(e.currentTarget.value)} />
          </label>
        </div>
        <button type="submit" disabled={busy}>
          Find offers
        </button>
      </form>
      {message && (
        <p role={message.kind === 'error' ? 'alert' : 'status'} class={message.kind}>
          {message.text}
        </p>
      )}
      {policyLines.length > 0 && (
        <ul class="policy-check" aria-label="Policy check">
          {policyLines.map((line) => (
            <li key={line}>{line}</li>
          ))}
        </ul>
      )}
      {offers && offers.length > 0 && (
        <ol class="options" aria-label="Offers">
          {offers.map((o) => {
            const startMs = parseDate(o.start_date);
            const endMs = parseDate(o.end_date);
            const heldUntil = holds[o.id];
            return (
              <li key={o.id} data-offer-id={o.id} class={heldUntil === undefined ? undefined : 'held'}>
                <span class={heldUntil === undefined ? 'ghost-swatch' : 'held-swatch'} aria-hidden="true" /> <strong class="kind">{KIND_WORDS[o.kind] ?? o.kind}</strong>: {formatRange(startMs, endMs)} ({formatDuration(endMs - startMs)}), {offerBooks(o)}
                <span class="reason"> · {o.reason}</span>{' '}
                {heldUntil !== undefined && <Countdown untilMs={heldUntil} />}{' '}
                <button type="button" disabled={busy} onClick={() => void book(o)}>
                  Book
                </button>{' '}
                {heldUntil === undefined && (
                  <button type="button" disabled={busy} onClick={() => void hold(o)}>
                    Hold
                  </button>
                )}
                {heldUntil !== undefined && (
                  <button type="button" disabled={busy} onClick={() => void release(o)}>
                    Release
                  </button>
                )}
              </li>
            );
          })}
        </ol>
      )}
    </section>
  );
}
