/**
 * "When can I get what I need?": hosts (how many, which properties), instance slots of a size, or
 * bandwidth, for how long, from when → the earliest windows that fit (POST /v1/availability/search,
 * asked again after each window for the next), drawn as ghost bars; one click books one.
 */
import { useState } from 'preact/hooks';
import { ApiFailure, call, parseDate, type CalendarBooking, type CalendarWindow, type Credentials, type FitAnswer } from './api';
import { formatRequestDate } from '../../src/domain/dates';
import type { Ghost } from './paint';
import { formatDuration, formatRange } from './time';

type Want = 'hosts' | 'instances' | 'bandwidth';

/** How many windows to offer. */
const OPTIONS = 3;

interface Option {
  startMs: number;
  endMs: number;
  start_date: string;
  end_date: string;
}

/** Hosts free over the whole window in the loaded calendar: where a ghost bar shows the booking could land. */
function freeHosts(calendar: CalendarWindow | undefined, byHost: Map<string, CalendarBooking[]>, startMs: number, endMs: number, count: number): Set<string> | null {
  if (!calendar) return null;
  const free = calendar.hosts.filter((h) => !(byHost.get(h.id) ?? []).some((b) => b.start_ms < endMs && startMs < b.end_ms));
  return new Set(free.slice(0, count).map((h) => h.id));
}

export function FindSlot(props: {
  credentials: Credentials;
  calendar?: CalendarWindow;
  byHost: Map<string, CalendarBooking[]>;
  onGhosts(ghosts: Ghost[]): void;
  onBooked(leaseId: string): void;
}) {
  const [want, setWant] = useState<Want>('hosts');
  const [count, setCount] = useState(1);
  const [properties, setProperties] = useState('');
  const [vcpus, setVcpus] = useState(2);
  const [memoryMb, setMemoryMb] = useState(2048);
  const [diskGb, setDiskGb] = useState(10);
  const [networkId, setNetworkId] = useState('');
  const [egressKbps, setEgressKbps] = useState(100_000);
  const [hours, setHours] = useState(2);
  const [earliest, setEarliest] = useState('');
  const [name, setName] = useState('');
  const [options, setOptions] = useState<Option[]>();
  const [message, setMessage] = useState<{ kind: 'error' | 'info'; text: string }>();
  const [busy, setBusy] = useState(false);

  const reservation = (): Record<string, unknown> => {
    if (want === 'hosts') return { resource_type: 'physical:host', min: count, max: count, hypervisor_properties: '', resource_properties: properties.trim() };
    if (want === 'instances') return { resource_type: 'virtual:instance', vcpus, memory_mb: memoryMb, disk_gb: diskGb, amount: count, affinity: false };
    return { resource_type: 'network:bandwidth', network_id: networkId.trim(), egress_kbps: egressKbps, amount: count };
  };

  async function search(event: Event) {
    event.preventDefault();
    setBusy(true);
    setMessage(undefined);
    setOptions(undefined);
    props.onGhosts([]);
    const durationMs = Math.round(hours * 3_600_000);
    let from = earliest ? parseDate(earliest) : Math.ceil(Date.now() / 60_000) * 60_000;
    const found: Option[] = [];
    try {
      for (let i = 0; i < OPTIONS; i++) {
        const answer = await call<FitAnswer>(props.credentials, 'POST', '/v1/availability/search', {
          start_date: formatRequestDate(from),
          end_date: formatRequestDate(from + durationMs),
          reservations: [reservation()],
        });
        if (!answer.earliest) {
          if (i === 0) setMessage({ kind: 'info', text: answer.note ?? 'Nothing fits: fewer hosts, a shorter window or other properties may.' });
          break;
        }
        const startMs = parseDate(answer.earliest.start_date);
        const endMs = parseDate(answer.earliest.end_date);
        found.push({ startMs, endMs, ...answer.earliest });
        from = endMs; // the next option begins where this one ends
      }
    } catch (err) {
      setMessage({ kind: 'error', text: err instanceof ApiFailure ? err.message : String(err) });
    } finally {
      setBusy(false);
    }
    setOptions(found);
    props.onGhosts(
      found.map((o, i) => ({ startMs: o.startMs, endMs: o.endMs, hostIds: want === 'hosts' ? freeHosts(props.calendar, props.byHost, o.startMs, o.endMs, count) : null, label: `option ${i + 1}` })),
    );
  }

  async function book(option: Option) {
    setBusy(true);
    setMessage(undefined);
    try {
      const leaseName = name.trim() || `calendar-${option.start_date.replace(/[ :]/g, '-')}`;
      const answer = await call<{ lease: { id: string; name: string } }>(props.credentials, 'POST', '/v1/leases', {
        name: leaseName,
        start_date: option.start_date,
        end_date: option.end_date,
        reservations: [reservation()],
        events: [],
      });
      setMessage({ kind: 'info', text: `Booked lease ${answer.lease.name} for ${formatRange(option.startMs, option.endMs)}.` });
      setOptions(undefined);
      props.onGhosts([]);
      props.onBooked(answer.lease.id);
    } catch (err) {
      setMessage({ kind: 'error', text: err instanceof ApiFailure ? err.message : String(err) });
    } finally {
      setBusy(false);
    }
  }

  const numberInput = (label: string, field: string, value: number, set: (n: number) => void, min: number, max: number, step = 1) => (
    <label>
      {label}{' '}
      <input name={field} type="number" min={min} max={max} step={step} value={value} required onInput={(e) => set(e.currentTarget.valueAsNumber)} />
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
          <label>
            From (UTC) <input name="earliest" type="datetime-local" value={earliest} onInput={(e) => setEarliest(e.currentTarget.value)} />
          </label>
          <label>
            Lease name <input name="lease_name" value={name} maxLength={80} placeholder="optional" onInput={(e) => setName(e.currentTarget.value)} />
          </label>
        </div>
        <button type="submit" disabled={busy}>
          Find the earliest windows
        </button>
      </form>
      {message && (
        <p role={message.kind === 'error' ? 'alert' : 'status'} class={message.kind}>
          {message.text}
        </p>
      )}
      {options && options.length > 0 && (
        <ol class="options" aria-label="Windows that fit">
          {options.map((o, i) => (
            <li key={o.start_date}>
              <span class="ghost-swatch" aria-hidden="true" /> {formatRange(o.startMs, o.endMs)} ({formatDuration(o.endMs - o.startMs)}){' '}
              <button type="button" disabled={busy} onClick={() => void book(o)} data-option={i}>
                Book this
              </button>
            </li>
          ))}
        </ol>
      )}
    </section>
  );
}
