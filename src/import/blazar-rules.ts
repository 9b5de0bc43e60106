/**
 * Blazar's rows held to the API's own rules before any of them reaches PostgreSQL: Blazar stored
 * what its API let through (a NUL, ESC or BEL in a name, a 300-character name, a 400-character
 * project id), and PostgreSQL cannot even be asked about a NUL. A lease or host that breaks a rule
 * is not importable, with why; the rest of the import goes on. No second copy of the rules: the
 * request input check (control characters, lone surrogates, length), the lease name's schema, the
 * identity headers' rule for project and user ids, and the host enrolment's for capabilities.
 */
import { identityProblem } from '../api/auth';
import { CONTROL_OR_LONE_SURROGATE, inputProblem, stringProblem } from '../api/input-check';
import { leaseName, requestWording } from '../api/lease-schemas';
import { isUuid } from '../domain/lease';
import { checkCapabilities } from '../resources/physical-host/inventory';
import type { BlazarCapability, BlazarHost, BlazarLease } from './blazar-source';

/** The first rule the lease's row breaks, as "field: what is wrong"; otherwise its name as the API would keep it (trimmed). */
export function checkLeaseRow(lease: BlazarLease): { problem: string } | { name: string } {
  if (!isUuid(lease.id)) return { problem: 'id: expected a UUID, as every lease id' };
  const textProblem = stringProblem(lease.name);
  if (textProblem) return { problem: `name: ${textProblem}` };
  const name = leaseName.safeParse(lease.name, { error: requestWording });
  if (!name.success) return { problem: `name: ${name.error.issues[0].message}` };
  for (const field of ['project_id', 'user_id'] as const) {
    const problem = lease[field] === null ? undefined : identityProblem(lease[field]);
    if (problem) return { problem: `${field}: ${problem}` };
  }
  return { name: name.data };
}

/** The first rule a reservation's id or parameters (as a request would send them) break, as "field: what is wrong". */
export function reservationProblem(reservationId: string, params: Record<string, unknown>): string | undefined {
  if (!isUuid(reservationId)) return `reservation id ${JSON.stringify(reservationId.slice(0, 40))}: expected a UUID`;
  const problem = inputProblem(params);
  return problem && `reservation ${reservationId}: ${problem.replace(/^body: /, '')}`;
}

/** The first rule a host's row or capabilities break (its name as enrolment takes it; Nova's fields and capabilities as any input). */
export function hostProblem(host: BlazarHost, name: string, capabilities: BlazarCapability[]): string | undefined {
  const fields = { id: host.id, hypervisor_hostname: name, service_name: host.service_name, hypervisor_type: host.hypervisor_type, cpu_info: host.cpu_info, availability_zone: host.availability_zone };
  for (const [field, value] of Object.entries(fields)) {
    const problem = typeof value === 'string' ? stringProblem(value) : undefined;
    if (problem) return `${field}: ${problem}`;
  }
  for (const c of capabilities) {
    const problem = stringProblem(c.property_name) ?? stringProblem(c.capability_value);
    if (problem) return `capability ${printable(c.property_name)}: ${problem}`;
  }
  try {
    checkCapabilities(Object.fromEntries(capabilities.map((c) => [c.property_name, c.capability_value])));
  } catch (err) {
    return `capabilities: ${(err as Error).message}`;
  }
  return undefined;
}

const CONTROLS = new RegExp(CONTROL_OR_LONE_SURROGATE.source, 'g');

/** Text with every control character (C0, DEL, C1) and lone surrogate written as a \u escape: safe to print on a terminal. */
export function escapeControls(text: string): string {
  return text.replace(CONTROLS, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/** Text as the report may quote it: in JSON's quotes, escaped, at most 80 characters. */
export function printable(text: string): string {
  return escapeControls(JSON.stringify(text.length > 80 ? `${text.slice(0, 80)}…` : text));
}
