import { sealPass } from '../../workers/kernel/room-seal';
import {
  type HubReply,
  ROOM_SHARDS,
  type RoomGoods,
  type RoomResult,
  type ShardReport,
  type TicketState,
  type TicketView,
} from '../../workers/kernel/waiting-room';
import { Book, type Ticket } from './book';
import { activeAt, defaultActive } from './hub-rules';
import { after, etaSeconds, exactKeysFor, joinPace, type Measured, measuredOr, NOTHING, placeOf, reportKeys, timeHorizon } from './rules';

/** How often a busy shard reports to the coordinator. */
export const TICK_MS = 1_000;
/**
 * How long a report waits for the coordinator. A call that never answers (seen under resets of
 * the room's objects: one shard's line stood still for three minutes) would otherwise hold the
 * report, and with it every tick of the shard; given up, it is made again on the next tick, and
 * the rounds it missed come with that answer.
 */
export const REPORT_DEADLINE_MS = 3 * TICK_MS;
/** A purchase token got just before a pass lapses still buys for its 60 s (workers/edge/purchase.ts). */
const TOKEN_GRACE_MS = 60_000;

/**
 * What a shard knows of its line right now (its tickets, the coordinator's last reply, the
 * rounds heard of, its shoppers' results), and what that makes of each ticket: its state, its
 * place, its view. The shard (shard.ts) changes it; this reads it.
 */
export class Standing {
  goods: RoomGoods | undefined;
  book = new Book();
  readonly results = new Map<string, { result: RoomResult; at: number }>();
  hub: HubReply | undefined;
  /** Shoppers let in since the last report, and their total lateness after their rounds' times (ShardReport.lateMs). */
  private late = { ms: 0, n: 0 };
  /** The latest round and cursor heard of (rounds may not be due yet). */
  knownRound = 0;
  knownCursor = '';

  constructor(private readonly tokenSecret: () => string) {}

  /** Notes `n` shoppers let in `lateMs` after their round's time, for the next report. */
  admittedLate(n: number, lateMs: number): void {
    this.late.ms += lateMs * n;
    this.late.n += n;
  }

  /**
   * The report to the coordinator: the waiting keys above the last cursor heard of (reportKeys),
   * the horizon below which every key is in it, and the shard's counters (`c`). It takes the
   * lateness noted since the last one (a report that fails to arrive loses one sample of a
   * running measure, nothing more).
   */
  report(
    goods: RoomGoods,
    now: number,
    c: Pick<ShardReport, 'shard' | 'arrivals' | 'joined' | 'admitted' | 'messages' | 'live'>,
  ): ShardReport {
    const start = this.book.firstAbove(this.knownCursor);
    const beyond = this.book.waiting.slice(start);
    const { keys, exact } = reportKeys(beyond, exactKeysFor(goods));
    const unkeyed = this.book.unkeyed.size;
    const horizon = unkeyed > 0 ? NOTHING : exact < beyond.length ? after(beyond[exact - 1] ?? '') : timeHorizon(now);
    const late = this.late;
    this.late = { ms: 0, n: 0 };
    return {
      goods,
      ...c,
      waiting: beyond.length,
      unkeyed,
      covered: start,
      keys,
      exact,
      horizon,
      ...this.admittedCounts(now),
      round: this.knownRound,
      quiet: beyond.length === 0 && unkeyed === 0,
      at: now,
      ...joinPace(beyond, now, TICK_MS),
      ...(late.n > 0 ? { lateMs: Math.round(late.ms / late.n) } : {}),
    };
  }

  /** Whether the room holds shoppers in line at `now` (before any reply: what the settings say). */
  active(goods: RoomGoods, now: number): boolean {
    return this.hub ? activeAt(this.hub.active, now) : defaultActive(goods, now);
  }

  /** A ticket's state: admitted (or lapsed), sold out behind the line, or waiting. */
  stateOf(t: Ticket, now: number): TicketState {
    const goods = this.goods;
    if (t.round !== null) {
      return !this.resultSince(t) && now >= (t.passExpiresAt ?? 0) ? 'EXPIRED' : 'ADMITTED';
    }
    if (goods && now >= goods.endAt) {
      return 'SOLD_OUT';
    }
    const line = this.hub?.line ?? null;
    if (line === null) {
      return 'WAITING';
    }
    if (t.key === null) {
      return line <= NOTHING ? 'SOLD_OUT' : 'WAITING';
    }
    return t.key > this.knownCursor && t.key >= line ? 'SOLD_OUT' : 'WAITING';
  }

  /** Shoppers ahead of a waiting ticket (an upper bound before the draw). */
  positionOf(t: Ticket): number {
    if (t.key === null) {
      return Math.max(0, (this.hub?.preQueued ?? this.book.unkeyed.size) - 1);
    }
    if (t.key <= this.knownCursor) {
      return 0;
    }
    if (t.position === null) {
      const start = this.book.firstAbove(this.knownCursor);
      t.position = placeOf(t.key, this.hub?.marks ?? { keys: [], counts: [] }, this.book.waiting, start, this.spread());
    }
    return t.position;
  }

  /** The ticket as its shopper sees it; an admitted one carries its pass. */
  async view(t: Ticket, now: number): Promise<TicketView> {
    const goods = this.goods;
    const state = this.stateOf(t, now);
    const position = state === 'WAITING' ? this.positionOf(t) : 0;
    const rate = this.hub?.admitPerSecond ?? goods?.admitPerSecond ?? 1;
    const result = this.results.get(t.userId)?.result;
    const view: TicketView = {
      ticketId: t.id,
      userId: t.userId,
      state,
      position,
      etaSeconds:
        state === 'WAITING' ? promised(t, etaSeconds(position, rate, now, goods?.startAt ?? 0, TICK_MS, this.measured()), rate) : 0,
      remaining: this.hub?.remaining ?? 0,
      orderKey: t.key,
      preQueue: t.pre,
      round: t.round,
      ...(result ? { result } : {}),
    };
    if (t.admittedAt !== null) {
      view.admittedAt = t.admittedAt;
    }
    if (state === 'ADMITTED' && goods && t.passExpiresAt !== null) {
      view.expiresAt = t.passExpiresAt;
      view.pass = await sealPass(this.tokenSecret(), {
        goodsId: goods.goodsId,
        userId: t.userId,
        ticketId: t.id,
        expiresAt: t.passExpiresAt,
      });
    }
    return view;
  }

  /** Admitted shoppers who may still buy: no result since their admission, pass or last token still valid. */
  outstanding(now: number): number {
    return this.admittedCounts(now).outstanding;
  }

  /**
   * The admitted shoppers in one walk over the tickets: those who may still buy (`outstanding`),
   * and those whose purchase succeeded since their admission, as far as this shard has heard
   * (`bought`). A shopper with neither has a refusal, or let the pass and the token lapse.
   */
  admittedCounts(now: number): { outstanding: number; bought: number } {
    let outstanding = 0;
    let bought = 0;
    for (const t of this.book.byUser.values()) {
      if (t.round === null) {
        continue;
      }
      const result = this.resultSince(t);
      if (result === undefined) {
        if (now < (t.passExpiresAt ?? 0) + TOKEN_GRACE_MS) {
          outstanding++;
        }
      } else if (result.status === 'SUCCESS') {
        bought++;
      }
    }
    return { outstanding, bought };
  }

  /** The result of an admitted ticket's purchase, when one came since its admission (an earlier one was a pass before). */
  private resultSince(t: Ticket): RoomResult | undefined {
    const got = this.results.get(t.userId);
    return got && got.at >= (t.admittedAt ?? 0) ? got.result : undefined;
  }

  /** Forgets every ticket, result and reply (a sale long over). */
  clear(): void {
    this.book = new Book();
    this.results.clear();
    this.hub = undefined;
  }

  /** The room's delays the ETA takes: the coordinator's measure, else the front lag expected for the room's shard count. */
  private measured(): Measured {
    return measuredOr(this.hub?.frontLagMs, this.hub?.lateMs, TICK_MS, this.spread());
  }

  /** Shoppers in the whole room that one of this shard's stands for (the room's shard count). */
  private spread(): number {
    return this.goods?.shards ?? ROOM_SHARDS;
  }

  /** Every waiting ticket's place from the latest marks; a place only ever moves forward. */
  placeAll(): void {
    const marks = this.hub?.marks;
    if (!marks) {
      return;
    }
    const start = this.book.firstAbove(this.knownCursor);
    const waiting = this.book.waiting;
    const spread = this.spread();
    for (let i = start; i < waiting.length; i++) {
      const key = waiting[i] ?? '';
      const t = this.book.ticketAt(key);
      if (t) {
        const p = placeOf(key, marks, waiting, start, spread);
        t.position = t.position === null ? p : Math.min(t.position, p);
      }
    }
  }
}

/**
 * The ETA to tell a waiting ticket: never more than the last one told at the same rate. The
 * measured delays it takes move a little each round, and on a busy machine up by more than the
 * line moved between two answers (a polled ETA rose from one second to the next while its place
 * fell); only a change of the rate may move a promise back.
 */
function promised(t: Ticket, seconds: number, rate: number): number {
  const told = t.eta;
  if (told && told.rate === rate && seconds > told.seconds) {
    return told.seconds;
  }
  t.eta = { seconds, rate };
  return seconds;
}
