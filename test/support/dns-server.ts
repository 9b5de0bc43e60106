/**
 * A stand-in name server on 127.0.0.1 (UDP), for the webhook address guard's tests: it answers A
 * and AAAA questions from `records` (a name not listed: NXDOMAIN; listed without an address of
 * the family asked: an empty answer), never answers a name listed as 'no answer', and records
 * every question it gets.
 */
import dgram from 'node:dgram';
import { isIP } from 'node:net';
import ipaddr from 'ipaddr.js';
import { freePort } from '../../dev-stack/ports';

const TYPE_A = 1;
const TYPE_AAAA = 28;

export interface DnsStandIn {
  /** `127.0.0.1:<port>`, as LK_WEBHOOK_DNS_SERVERS takes it. */
  server: string;
  /** Lower-case names without the final dot; change them at will (a name that rebinds). */
  records: Map<string, string[] | 'no answer'>;
  /** Every question, in order of arrival: `<name> A` or `<name> AAAA`. */
  questions: string[];
  /** Resolves once `count` questions have arrived in all. */
  questionsReceived: (count: number) => Promise<void>;
  close: () => Promise<void>;
}

/** The question's name, type and where it ends, or undefined for a packet that is not one question. */
function parseQuestion(packet: Buffer): { name: string; type: number; end: number } | undefined {
  if (packet.length < 12 || packet.readUInt16BE(4) !== 1) return undefined;
  const labels: string[] = [];
  let at = 12;
  // A name has at most 127 labels: the loop ends there whatever the packet says.
  for (let i = 0; i < 128 && at < packet.length; i++) {
    const length = packet[at];
    if (length === 0) {
      if (at + 5 > packet.length) return undefined;
      return { name: labels.join('.').toLowerCase(), type: packet.readUInt16BE(at + 1), end: at + 5 };
    }
    if (length > 63) return undefined;
    labels.push(packet.toString('latin1', at + 1, at + 1 + length));
    at += 1 + length;
  }
  return undefined;
}

function answer(query: Buffer, question: { type: number; end: number }, addresses: string[] | undefined): Buffer {
  const family = question.type === TYPE_A ? 4 : question.type === TYPE_AAAA ? 6 : 0;
  const rdatas = (addresses ?? []).filter((address) => isIP(address) === family).map((address) => Buffer.from(ipaddr.parse(address).toByteArray()));
  const header = Buffer.alloc(12);
  query.copy(header, 0, 0, 2); // the id
  // A response, recursion desired (as asked) and available; NXDOMAIN for a name not listed.
  header.writeUInt16BE(0x8080 | (query.readUInt16BE(2) & 0x0100) | (addresses === undefined ? 3 : 0), 2);
  header.writeUInt16BE(1, 4);
  header.writeUInt16BE(rdatas.length, 6);
  const records = rdatas.map((rdata) => {
    const record = Buffer.alloc(12);
    record.writeUInt16BE(0xc00c, 0); // the name: a pointer to the question's
    record.writeUInt16BE(question.type, 2);
    record.writeUInt16BE(1, 4); // IN
    record.writeUInt32BE(60, 6);
    record.writeUInt16BE(rdata.length, 10);
    return Buffer.concat([record, rdata]);
  });
  return Buffer.concat([header, query.subarray(12, question.end), ...records]);
}

/** A UDP socket bound on 127.0.0.1 to a port free a moment ago (one free for TCP may be taken for UDP: a few tries). */
async function boundSocket(): Promise<{ socket: dgram.Socket; port: number }> {
  for (let attempt = 0; attempt < 10; attempt++) {
    const port = await freePort();
    const socket = dgram.createSocket('udp4');
    const bound = await new Promise<boolean>((resolve) => {
      socket.once('error', () => resolve(false));
      socket.bind(port, '127.0.0.1', () => resolve(true));
    });
    if (bound) return { socket, port };
    socket.close();
  }
  throw new Error('no free UDP port for the stand-in name server');
}

export async function startDnsStandIn(records: Record<string, string[] | 'no answer'> = {}): Promise<DnsStandIn> {
  const { socket, port } = await boundSocket();
  const state = { records: new Map(Object.entries(records)), questions: [] as string[] };
  const waiting: Array<{ count: number; resolve: () => void }> = [];
  socket.on('message', (packet, from) => {
    const question = parseQuestion(packet);
    if (!question) return;
    state.questions.push(`${question.name} ${question.type === TYPE_A ? 'A' : question.type === TYPE_AAAA ? 'AAAA' : question.type}`);
    for (const waiter of waiting.filter((w) => state.questions.length >= w.count)) {
      waiting.splice(waiting.indexOf(waiter), 1);
      waiter.resolve();
    }
    const listed = state.records.get(question.name);
    if (listed === 'no answer') return;
    socket.send(answer(packet, question, listed), from.port, from.address);
  });
  return {
    server: `127.0.0.1:${port}`,
    records: state.records,
    questions: state.questions,
    questionsReceived: (count) => (state.questions.length >= count ? Promise.resolve() : new Promise((resolve) => waiting.push({ count, resolve }))),
    close: () => new Promise((resolve) => socket.close(() => resolve())),
  };
}
