import net from 'node:net';
import { standardServerPorts } from '../../scripts/lib/temporal-server';

/** A loopback port that was free a moment ago. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/** Whether `port` on loopback can be bound right now. */
function portIsFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/**
 * A frontend port for a temporal-server with every port of Temporal's layout around it
 * (standardServerPorts) free. Below 32768: the server records its members' ports in a PostgreSQL
 * smallint column, so a port of the kernel's ephemeral range (what freePort hands out) makes it
 * exit at start.
 */
export async function freeTemporalServerPort(): Promise<number> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const frontend = 10_000 + Math.floor(Math.random() * 22_000);
    let free = true;
    for (const port of Object.values(standardServerPorts(frontend))) {
      if (!(await portIsFree(port))) {
        free = false;
        break;
      }
    }
    if (free) return frontend;
  }
  throw new Error('no free loopback ports for a temporal-server between 9700 and 32006');
}

/** Two neighbouring free loopback ports (a process that serves on `port` and `port + 1`); gives the first. */
export async function freePortPair(): Promise<number> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const port = 10_000 + Math.floor(Math.random() * 50_000);
    if ((await portIsFree(port)) && (await portIsFree(port + 1))) return port;
  }
  throw new Error('no two neighbouring free loopback ports');
}
