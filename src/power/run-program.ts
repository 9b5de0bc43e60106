/**
 * Runs one power program (ipmitool, an operator's own) as an argv, never through a shell, with a
 * bounded time and bounded output. The program gets only the environment given (and PATH), not the
 * worker's: its secrets (database URL, OpenStack password) stay out of operators' programs. It runs
 * in its own process group, so that a time-out kills what it started too.
 */
import { spawn } from 'node:child_process';
import { PowerConfigError, PowerTimeoutError } from './errors';

/** Output kept per stream: enough for a status line and an error message, never a flood. */
export const MAX_PROGRAM_OUTPUT_BYTES = 16 * 1024;

export interface ProgramRun {
  /** The exit status; null when a signal ended the program. */
  code: number | null;
  stdout: string;
  stderr: string;
}

export interface ProgramOptions {
  /** The host the program acts on (for the errors' messages). */
  host: string;
  /** Added to PATH (and LANG=C, so that messages are parsed in one language). */
  env: Record<string, string>;
  timeoutMs: number;
  signal?: AbortSignal;
}

/** Runs `argv` and resolves with its exit and output; throws PowerTimeoutError past the bound, PowerConfigError when it cannot start. */
export function runProgram(argv: readonly string[], options: ProgramOptions): Promise<ProgramRun> {
  const [file, ...args] = argv;
  if (!file) return Promise.reject(new PowerConfigError('no program to run', options.host));
  return new Promise<ProgramRun>((resolve, reject) => {
    const child = spawn(file, args, {
      shell: false,
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { PATH: process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin', LANG: 'C', ...options.env },
    });
    const output = { stdout: '', stderr: '' };
    for (const name of ['stdout', 'stderr'] as const) {
      child[name].setEncoding('utf8');
      child[name].on('data', (chunk: string) => {
        if (output[name].length < MAX_PROGRAM_OUTPUT_BYTES) output[name] = (output[name] + chunk).slice(0, MAX_PROGRAM_OUTPUT_BYTES);
      });
    }
    let settled = false;
    const finish = (outcome: () => void) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      options.signal?.removeEventListener('abort', onAbort);
      outcome();
    };
    const killGroup = () => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
      } catch {
        // Already gone.
      }
    };
    const timer = setTimeout(() => {
      killGroup();
      finish(() => reject(new PowerTimeoutError(`${file} gave no answer within ${options.timeoutMs} ms`, options.host)));
    }, options.timeoutMs);
    const onAbort = () => {
      killGroup();
      const reason: unknown = options.signal?.reason;
      finish(() => reject(reason instanceof Error ? reason : new Error('aborted')));
    };
    options.signal?.addEventListener('abort', onAbort, { once: true });
    if (options.signal?.aborted) onAbort();
    child.on('error', (error: NodeJS.ErrnoException) => {
      const cannotStart = error.code === 'ENOENT' || error.code === 'EACCES';
      finish(() => reject(cannotStart ? new PowerConfigError(`${file} cannot be run (${error.code}): is it installed and executable?`, options.host, { cause: error }) : error));
    });
    child.on('close', (code) => finish(() => resolve({ code, stdout: output.stdout, stderr: output.stderr })));
  });
}

/** The last non-empty line of a program's output, short: what an error message may quote. */
export function lastLine(text: string): string {
  const lines = text.split('\n').map((line) => line.trim()).filter((line) => line !== '');
  return (lines[lines.length - 1] ?? '').slice(0, 200);
}
