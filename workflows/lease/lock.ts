/** A mutex for workflow code (deterministic: it only waits on workflow state). */
import { condition } from '@temporalio/workflow';

export class Lock {
  held = false;

  async run<T>(fn: () => Promise<T>): Promise<T> {
    await condition(() => !this.held);
    this.held = true;
    try {
      return await fn();
    } finally {
      this.held = false;
    }
  }
}
