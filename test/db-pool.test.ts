/**
 * A connection cut while it is lent out must not end the process. node-postgres hands a pooled
 * connection to `pool.connect()`'s caller through a promise, one microtask before the caller could
 * listen for its errors; a server that shuts down right after "ready for query" puts both messages
 * in one TCP read, and the cut lands in between (CI saw this once, PostgreSQL restarting under
 * load). A fake server sends exactly that, every time.
 */
import net from 'node:net';
import { createPool, isDatabaseUnavailable, withConnection } from '../src/db/pool';

function message(type: string, body: Buffer): Buffer {
  const length = Buffer.alloc(4);
  length.writeInt32BE(body.length + 4);
  return Buffer.concat([Buffer.from(type), length, body]);
}

const authenticationOk = message('R', Buffer.from([0, 0, 0, 0]));
const readyForQuery = message('Z', Buffer.from('I'));
const fields = (entries: Record<string, string>) => Buffer.concat([...Object.entries(entries).map(([code, value]) => Buffer.from(`${code}${value}\0`)), Buffer.from([0])]);
const adminShutdown = message('E', fields({ S: 'FATAL', V: 'FATAL', C: '57P01', M: 'terminating connection due to administrator command' }));

/** Accepts any start-up, then answers "ready" and "shutting down" in one write, and closes. */
async function serverThatShutsDownOnReady(): Promise<{ url: string; close(): Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => undefined);
    socket.once('data', () => socket.end(Buffer.concat([authenticationOk, readyForQuery, adminShutdown])));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  return {
    url: `postgres://nobody@127.0.0.1:${port}/none`,
    close: () => {
      for (const socket of sockets) socket.destroy();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

describe('the connection pool', () => {
  it('reports a connection cut as it is handed over as the next query error, never as an unhandled error event', async () => {
    const server = await serverThatShutsDownOnReady();
    const idleErrors: Error[] = [];
    const pool = createPool({ database: { url: server.url, poolSize: 2 } }, 'leasekeeper-test', (err) => idleErrors.push(err));
    try {
      const failures: unknown[] = [];
      for (let i = 0; i < 5; i++) {
        await withConnection(pool, (client) => client.query('SELECT 1')).catch((err: unknown) => failures.push(err));
      }
      expect(failures).toHaveLength(5);
      for (const failure of failures) expect(isDatabaseUnavailable(failure)).toBe(true);
      // Each cut connection was discarded, not lent again.
      expect(pool.totalCount).toBe(0);
      expect(idleErrors).toEqual([]);
    } finally {
      await pool.end();
      await server.close();
    }
  });
});
