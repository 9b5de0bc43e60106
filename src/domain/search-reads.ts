/**
 * The calendar reads one request's searches share (offers: up to MAX_OFFER_SEARCHES searches of
 * the same resources over overlapping windows). A read of bookings over [fromMs, untilMs) answers
 * any later one within it, narrowed to that window, so the planner's searches cost one read per
 * resource type, not one each. Memory: the reads kept are the widest each search already made
 * (at most one whole read of the candidates' bookings per kind of read), dropped with the request.
 */
interface Kept {
  fromMs: number;
  untilMs: number;
  read: Promise<unknown>;
}

export class SearchReads {
  private readonly kept = new Map<string, Kept[]>();

  /**
   * The bookings under `key` over [fromMs, untilMs) (null: from `fromMs` on): narrowed from a read
   * kept that covers them, or `load`ed and kept. `narrow` drops what lies outside the window.
   */
  read<T>(key: string, fromMs: number, untilMs: number | null, load: () => Promise<T>, narrow: (wider: T) => T): Promise<T> {
    const until = untilMs ?? Infinity;
    const reads = this.kept.get(key) ?? [];
    const covering = reads.find((r) => r.fromMs <= fromMs && r.untilMs >= until);
    if (covering) return (covering.read as Promise<T>).then(narrow);
    const read = load();
    // A read that failed is not kept: the next search reads again.
    read.catch(() => this.kept.set(key, (this.kept.get(key) ?? []).filter((r) => r.read !== read)));
    // A wider read replaces those it covers.
    this.kept.set(key, [...reads.filter((r) => !(fromMs <= r.fromMs && r.untilMs <= until)), { fromMs, untilMs: until, read }]);
    return read;
  }
}
