/**
 * A webhook receiver on 127.0.0.1 for lease notices: records what it is sent, answering the first
 * `failFirst` deliveries with 503 (so that a test sees the sender retry).
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface ReceivedNotice {
  headers: http.IncomingHttpHeaders;
  body: { event_type: string; payload: Record<string, unknown> };
}

export interface NoticeReceiver {
  url: string;
  received: ReceivedNotice[];
  /** Deliveries answered 503 so far. */
  refused: () => number;
  close: () => Promise<void>;
}

export async function startNoticeReceiver(failFirst = 0): Promise<NoticeReceiver> {
  const received: ReceivedNotice[] = [];
  let refused = 0;
  const server = http.createServer((req, res) => {
    let text = '';
    req.on('data', (chunk: Buffer) => (text += chunk.toString()));
    req.on('end', () => {
      if (refused < failFirst) {
        refused++;
        res.writeHead(503).end();
        return;
      }
      received.push({ headers: req.headers, body: JSON.parse(text) });
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks/leases`,
    received,
    refused: () => refused,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
