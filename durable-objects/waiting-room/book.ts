import { after, lowerBound } from './rules';
import type { TicketRow } from './storage';

// A shard's tickets in memory, rebuilt from its table when the object loads: every ticket by
// shopper and by id, and the line itself, the waiting keys in order. Plain data; the shard
// writes each change to storage in the same step.

export type Ticket = {
  id: string;
  userId: string;
  /** The order key; null for a pre-queue ticket until the draw. */
  key: string | null;
  joinedAt: number;
  pre: boolean;
  round: number | null;
  admittedAt: number | null;
  passExpiresAt: number | null;
  /** The last place told, so a place never goes back while the key stays. */
  position: number | null;
  /**
   * The last ETA told while waiting and the rate it was told at, so that a measured delay moving
   * up between two answers does not make the promise go back (a change of the rate may).
   */
  eta: { seconds: number; rate: number } | null;
};

export function toRow(t: Ticket): TicketRow {
  return {
    id: t.id,
    user_id: t.userId,
    order_key: t.key,
    joined_at: t.joinedAt,
    pre: t.pre ? 1 : 0,
    admitted_round: t.round,
    admitted_at: t.admittedAt,
    pass_expires_at: t.passExpiresAt,
  };
}

function fromRow(r: TicketRow): Ticket {
  return {
    id: r.id,
    userId: r.user_id,
    key: r.order_key,
    joinedAt: r.joined_at,
    pre: r.pre === 1,
    round: r.admitted_round,
    admittedAt: r.admitted_at,
    passExpiresAt: r.pass_expires_at,
    position: null,
    eta: null,
  };
}

export class Book {
  readonly byUser = new Map<string, Ticket>();
  readonly byId = new Map<string, Ticket>();
  private readonly byKey = new Map<string, Ticket>();
  /** Keys of the tickets waiting in line (keyed, not admitted), ascending. */
  waiting: string[] = [];
  /** Pre-queue tickets waiting for the draw. */
  readonly unkeyed = new Set<Ticket>();

  load(rows: TicketRow[]): void {
    for (const r of rows) {
      const t = fromRow(r);
      this.byUser.set(t.userId, t);
      this.byId.set(t.id, t);
      if (t.round === null) {
        if (t.key === null) {
          this.unkeyed.add(t);
        } else {
          this.byKey.set(t.key, t);
          this.waiting.push(t.key);
        }
      }
    }
    this.waiting.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  }

  /** A new ticket, or one back in line. */
  enter(t: Ticket): void {
    this.byUser.set(t.userId, t);
    this.byId.set(t.id, t);
    if (t.round !== null) {
      return;
    }
    if (t.key === null) {
      this.unkeyed.add(t);
      return;
    }
    this.byKey.set(t.key, t);
    // Arrivals come in time order, so this is nearly always an append.
    const i = lowerBound(this.waiting, t.key);
    this.waiting.splice(i, 0, t.key);
  }

  /** Gives a pre-queue ticket its drawn key. */
  draw(t: Ticket, key: string): void {
    this.unkeyed.delete(t);
    t.key = key;
    this.enter(t);
  }

  /** Takes every waiting ticket up to `cursor` out of the line, in order, stamped with `round`. */
  admitUpTo(cursor: string, round: number, at: number, passMs: number): Ticket[] {
    const cut = lowerBound(this.waiting, after(cursor));
    const keys = this.waiting.splice(0, cut);
    return keys.flatMap((k) => {
      const t = this.byKey.get(k);
      this.byKey.delete(k);
      if (!t) {
        return [];
      }
      t.round = round;
      t.admittedAt = at;
      t.passExpiresAt = at + passMs;
      t.position = 0;
      return [t];
    });
  }

  /** Index of the first waiting key above `cursor`. */
  firstAbove(cursor: string): number {
    return cursor === '' ? 0 : lowerBound(this.waiting, after(cursor));
  }

  ticketAt(key: string): Ticket | undefined {
    return this.byKey.get(key);
  }
}
