import fs from 'node:fs';

export default async function globalTeardown(): Promise<void> {
  const servers = globalThis.__LK_TEST_SERVERS__;
  if (!servers) return;
  globalThis.__LK_TEST_SERVERS__ = undefined; // both jest projects call this: stop once
  await Promise.all(servers.processes.map((proc) => proc.stop()));
  fs.rmSync(servers.tmpDir, { recursive: true, force: true });
}
