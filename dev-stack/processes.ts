/**
 * Child processes of the dev stack and of the test run: spawned in their own process group,
 * output prefixed line by line, stopped by PID (signal, bounded wait, then SIGKILL), and
 * recorded in a PID file so that a stack killed with -9 can be cleaned up at the next start.
 */
import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';

const COLORS = [36, 35, 33, 32, 34, 31];
let nextColor = 0;

export interface ManagedProcessOptions {
  name: string;
  command: string;
  args: string[];
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /** Where to record the PID; removed when the process is stopped. */
  pidDir?: string;
  /** Print the child's output (prefixed); otherwise keep only the last lines for error reports. */
  echo?: boolean;
  /** How this process likes to be asked to stop (postgres: SIGINT = fast shutdown). */
  stopSignal?: NodeJS.Signals;
}

export class ManagedProcess {
  readonly child: ChildProcess;
  readonly exited: Promise<number | null>;
  private readonly recent: string[] = [];
  private readonly lineListeners: Array<(line: string) => void> = [];
  private exitCode: number | null | undefined;

  constructor(readonly options: ManagedProcessOptions) {
    const spawnOptions: SpawnOptions = {
      cwd: options.cwd,
      env: options.env ?? process.env,
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true, // own process group: a terminal's Ctrl-C reaches only the supervisor, which stops us in order
    };
    this.child = spawn(options.command, options.args, spawnOptions);
    const color = COLORS[nextColor++ % COLORS.length];
    const prefix = process.stdout.isTTY ? `\x1b[${color}m${options.name.padEnd(9)}|\x1b[0m ` : `${options.name.padEnd(9)}| `;
    for (const stream of [this.child.stdout, this.child.stderr]) {
      if (!stream) continue;
      readline.createInterface({ input: stream }).on('line', (line) => {
        this.recent.push(line);
        if (this.recent.length > 40) this.recent.shift();
        if (options.echo) process.stdout.write(prefix + line + '\n');
        for (const listener of this.lineListeners) listener(line);
      });
    }
    this.exited = new Promise((resolve) => {
      this.child.on('exit', (code, signal) => {
        this.exitCode = code ?? (signal ? null : 0);
        this.removePidFile();
        resolve(code);
      });
      this.child.on('error', (err) => {
        this.recent.push(`spawn failed: ${err.message}`);
        this.exitCode = null;
        resolve(null);
      });
    });
    if (options.pidDir && this.child.pid) {
      fs.mkdirSync(options.pidDir, { recursive: true });
      fs.writeFileSync(this.pidFile(), `${this.child.pid} ${processStartTime(this.child.pid) ?? ''}\n`);
    }
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  get running(): boolean {
    return this.exitCode === undefined;
  }

  /** The last lines the process printed, for error messages. */
  tail(): string {
    return this.recent.slice(-15).join('\n');
  }

  /** Resolves when the process prints a line matching `pattern`; rejects if it exits first or time runs out. */
  waitForLine(pattern: RegExp, timeoutMs: number): Promise<void> {
    if (this.recent.some((line) => pattern.test(line))) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${this.options.name}: not ready after ${timeoutMs} ms\n${this.tail()}`)), timeoutMs);
      this.lineListeners.push((line) => {
        if (pattern.test(line)) {
          clearTimeout(timer);
          resolve();
        }
      });
      void this.exited.then((code) => {
        clearTimeout(timer);
        reject(new Error(`${this.options.name} exited (code ${code}) before it was ready\n${this.tail()}`));
      });
    });
  }

  /** Asks the process to stop, waits up to `timeoutMs`, then kills its whole process group. */
  async stop(timeoutMs = 15_000): Promise<void> {
    const pid = this.child.pid;
    if (!pid || !this.running) return;
    signal(pid, this.options.stopSignal ?? 'SIGTERM');
    const killTimer = setTimeout(() => signal(-pid, 'SIGKILL'), timeoutMs);
    await this.exited;
    clearTimeout(killTimer);
    signal(-pid, 'SIGKILL'); // anything the process left behind in its group
  }

  private pidFile(): string {
    return path.join(this.options.pidDir ?? '', `${this.options.name}.pid`);
  }

  private removePidFile(): void {
    if (this.options.pidDir) fs.rmSync(this.pidFile(), { force: true });
  }
}

function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch {
    // already gone
  }
}

export function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** The kernel's start time of a process (clock ticks since boot): with the PID, it names one process for good. */
function processStartTime(pid: number): string | undefined {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    return undefined;
  }
}

/**
 * Kills processes recorded by an earlier run that died without cleaning up (kill -9, crash).
 * A PID is killed only if it is still the same process (same start time), so a recycled PID is left alone.
 */
export function killStaleProcesses(pidDir: string, log: (msg: string) => void): void {
  if (!fs.existsSync(pidDir)) return;
  for (const file of fs.readdirSync(pidDir).filter((f) => f.endsWith('.pid'))) {
    const [pidText, startTime] = fs.readFileSync(path.join(pidDir, file), 'utf8').trim().split(' ');
    const pid = Number(pidText);
    if (pid > 0 && startTime && processStartTime(pid) === startTime) {
      log(`stopping ${file.replace(/\.pid$/, '')} (PID ${pid}) left over from an earlier run`);
      signal(-pid, 'SIGKILL');
      signal(pid, 'SIGKILL');
    }
    fs.rmSync(path.join(pidDir, file), { force: true });
  }
}

/** Polls `check` (at least once) until it succeeds or `timeoutMs` passes; rethrows the last failure. */
export async function waitUntil<T>(what: string, check: () => Promise<T>, timeoutMs: number, intervalMs = 200): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      return await check();
    } catch (err) {
      lastError = err;
    }
    if (Date.now() + intervalMs > deadline) break;
    await delay(intervalMs);
  }
  throw new Error(`${what}: not ready after ${timeoutMs} ms: ${lastError instanceof Error ? lastError.message : String(lastError)}`);
}
