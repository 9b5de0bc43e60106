import dgram from 'node:dgram';
import fs from 'node:fs';
import net from 'node:net';
import { standardServerPorts } from './temporal-server';

/**
 * Where tests pick ports for the servers they start: above the OpenStack rig's block (10000 +
 * the usual ports, all below 20000) and below the kernel's ephemeral range. A port is picked
 * here and bound seconds later by another process; inside the ephemeral range any outgoing
 * connection (or its 60 s TIME_WAIT) may take it meanwhile, and the server fails with
 * EADDRINUSE. Below that range the kernel never hands a port out on its own.
 */
const PICK_FROM = 20_000;
const ephemeralPortsFrom = ((): number => {
  try {
    const low = Number(fs.readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    return Number.isInteger(low) && low > 0 ? low : 32_768;
  } catch {
    return 32_768; // Linux's default
  }
})();

/** Whether `port` on loopback can be bound right now. */
function portIsFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/** Whether UDP `port` on loopback can be bound right now. */
function udpPortIsFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = dgram.createSocket('udp4');
    socket.once('error', () => {
      socket.close();
      resolve(false);
    });
    socket.bind(port, '127.0.0.1', () => socket.close(() => resolve(true)));
  });
}

/**
 * A port whose whole block (`port + offset` for each offset) is free on loopback now, with every
 * port of the block in [PICK_FROM, ephemeralPortsFrom).
 */
async function freeBlock(offsets: readonly number[], what: string, isFree: (port: number) => Promise<boolean> = portIsFree): Promise<number> {
  const lowest = PICK_FROM - Math.min(0, ...offsets);
  const highest = ephemeralPortsFrom - 1 - Math.max(0, ...offsets);
  if (highest < lowest) throw new Error(`no room for ${what} between ${PICK_FROM} and the ephemeral range (from ${ephemeralPortsFrom})`);
  for (let attempt = 0; attempt < 200; attempt++) {
    const port = lowest + Math.floor(Math.random() * (highest - lowest + 1));
    let free = true;
    for (const offset of offsets) {
      if (!(await isFree(port + offset))) {
        free = false;
        break;
      }
    }
    if (free) return port;
  }
  throw new Error(`no free loopback ports for ${what} between ${lowest} and ${highest}`);
}

/** A loopback port that was free a moment ago. */
export function freePort(): Promise<number> {
  return freeBlock([0], 'a server');
}

/** A loopback UDP port that was free a moment ago (a BMC simulator's, IPMI being UDP). */
export function freeUdpPort(): Promise<number> {
  return freeBlock([0], 'a UDP server', udpPortIsFree);
}

/** Two neighbouring free loopback ports (a process that serves on `port` and `port + 1`); gives the first. */
export function freePortPair(): Promise<number> {
  return freeBlock([0, 1], 'two neighbouring ports');
}

/**
 * A frontend port for a temporal-server with every port of Temporal's layout around it
 * (standardServerPorts) free. Below the ephemeral range for one more reason: the server records
 * its members' ports in a PostgreSQL smallint column, so a port above 32767 makes it exit at start.
 */
export function freeTemporalServerPort(): Promise<number> {
  const offsets = Object.values(standardServerPorts(0));
  return freeBlock(offsets, 'a temporal-server');
}
