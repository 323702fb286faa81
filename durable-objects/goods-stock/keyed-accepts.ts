import {
  ACCEPTED_KEYED_MAX,
  ACCEPTED_KEYED_WINDOW_MS,
  type ReserveItem,
  type ReserveOutcome,
  type SoldOutNote,
} from '../../workers/kernel/contract';

// The keyed purchases this object accepted in the last few minutes, for its SOLD_OUT answers:
// the edge answers a keyed request from its sold-out fast path unless this object accepted
// that key (its retry is owed the 202 again). In memory, bounded, rebuilt from an index on the
// reservations' time when the object starts; nothing here reads all reservations.

type Entry = { requestId: string; at: number };

export class KeyedAccepts {
  /** Oldest first; at most max + 1 entries (the one beyond says the list is truncated). */
  private entries: Entry[] = [];
  private note: SoldOutNote | undefined;

  constructor(
    private readonly windowMs = ACCEPTED_KEYED_WINDOW_MS,
    private readonly max = ACCEPTED_KEYED_MAX,
  ) {}

  /** How many entries storage should give `load`: one beyond the cap tells truncation. */
  get loadLimit(): number {
    return this.max + 1;
  }

  /** Takes what storage holds (newest first), when the object starts. */
  load(newestFirst: Entry[]): void {
    this.entries = newestFirst.slice(0, this.max + 1).reverse();
    this.note = undefined;
  }

  add(requestId: string, at: number): void {
    this.entries.push({ requestId, at });
    if (this.entries.length > this.max + 1) {
      this.entries.shift();
    }
    this.note = undefined;
  }

  /**
   * Remembers a batch's keyed purchases just accepted and adds the list to its SOLD_OUT answers
   * (the same array in each, so an RPC answer carries it once).
   */
  answer(items: ReserveItem[], outcomes: ReserveOutcome[], now: number): ReserveOutcome[] {
    outcomes.forEach((o, i) => {
      if (o.ok && !o.replay && items[i]?.keyed) {
        this.add(o.requestId, now);
      }
    });
    if (!outcomes.some((o) => !o.ok && o.reason === 'SOLD_OUT')) {
      return outcomes;
    }
    const note = this.soldOutNote(now);
    return outcomes.map((o) => (!o.ok && o.reason === 'SOLD_OUT' ? { ...o, ...note } : o));
  }

  /** The list a SOLD_OUT answer carries; one array for every answer until the next change. */
  soldOutNote(now: number): SoldOutNote {
    const cutoff = now - this.windowMs;
    let drop = 0;
    while (drop < this.entries.length && (this.entries[drop]?.at ?? 0) <= cutoff) {
      drop++;
    }
    if (drop > 0) {
      this.entries.splice(0, drop);
      this.note = undefined;
    }
    if (!this.note) {
      const truncated = this.entries.length > this.max;
      this.note = {
        acceptedKeyed: this.entries.slice(truncated ? 1 : 0).map((e) => e.requestId),
        acceptedKeyedTruncated: truncated,
      };
    }
    return this.note;
  }
}
