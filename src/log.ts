import pino, { type Logger } from 'pino';
import type { Config } from './config';

export type { Logger };

/** Structured JSON logs, one line per event, tagged with the emitting process. */
export function createLogger(config: Pick<Config, 'logLevel'>, service: string): Logger {
  return pino({ level: config.logLevel, base: { service }, timestamp: pino.stdTimeFunctions.isoTime });
}
