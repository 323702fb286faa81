import { getConfig } from '../../workers/kernel/config';
import { randomId } from '../../workers/kernel/crypto';
import { log } from '../../workers/kernel/log';
import { ticketAnswer } from '../../workers/kernel/room-seal';
import { sleep } from '../../workers/kernel/sleep';
import { type JoinOutcome, opensAt, RoomGoods, type Round, type ShopperResult, type TicketView } from '../../workers/kernel/waiting-room';
import { callWithin } from '../../workers/kernel/within';
import { roomHub } from '../routing';
import { type Ticket, toRow } from './book';
import { acceptLive, attachmentOf, due, pushResults, resultEvent, send, sent, stateEvent, userTag } from './live';
import { arrivalKey, shuffleKey } from './rules';
import { REPORT_DEADLINE_MS, Standing, TICK_MS } from './standing';
import { ShardCounters as Counters, type RoomStorage } from './storage';

/** How often a shard whose waiting shoppers are all sold out looks whether units came back. */
const SOLD_OUT_TICK_MS = 5_000;
/** The close code of a live channel whose join the shard refused (the reason names why: NOT_STARTED, ENDED). */
const JOIN_REFUSED_CLOSE = 4409;
/** An alarm this late is run by the shard's next call instead (catchUp): see docs/waiting-room.md on joining upgrades. */
const OVERDUE_ALARM_MS = 250;
/** A shard forgets a sale's tickets this long after it ended. */
const FORGET_AFTER_MS = 24 * 3600_000;

/**
 * One shard of a goods' waiting room: the tickets of the shoppers whose user id hashes here,
 * their live connections, and the once-a-tick exchange with the coordinator that moves the line.
 */
export class ShardRoom {
  private readonly s: Standing;
  private counters: Counters = { shard: -1, joined: 0, admitted: 0, messages: 0, round: 0, cursor: '' };
  /** Rounds heard of but not yet due, and the latest round and cursor known. */
  private pending: Round[] = [];
  private arrivals = 0;
  private reporting = false;
  private reportedAt = 0;
  /** The last report said nothing waits here: the next waiting shopper is reported before the join is answered. */
  private quietReported = false;
  private alarmAt: number | null = null;
  private ticking = false;

  constructor(
    private readonly ctx: DurableObjectState,
    private readonly env: Env,
    private readonly store: RoomStorage,
  ) {
    this.s = new Standing(() => getConfig(env).tokenSecret);
    this.s.goods = store.state('goods', (raw) => RoomGoods.parse(raw));
    this.counters = store.state('shard', (raw) => Counters.parse(raw)) ?? this.counters;
    this.s.knownRound = this.counters.round;
    this.s.knownCursor = this.counters.cursor;
    this.s.book.load(store.tickets());
    for (const r of store.results()) {
      this.s.results.set(r.userId, { result: r.result, at: r.at });
    }
  }

  /** The goods' latest settings, as the edge sent them. */
  see(goods: RoomGoods, shard: number): RoomGoods {
    if (JSON.stringify(goods) !== JSON.stringify(this.s.goods)) {
      this.s.goods = goods;
      this.store.saveState('goods', goods);
    }
    if (this.counters.shard !== shard) {
      this.counters.shard = shard;
      this.store.saveState('shard', this.counters);
    }
    return goods;
  }

  /** Joins the line (idempotent per shopper; a lapsed ticket goes to the back). */
  async join(goods: RoomGoods, userId: string): Promise<JoinOutcome> {
    const now = Date.now();
    const known = this.s.book.byUser.get(userId);
    if (known && !(this.s.stateOf(known, now) === 'EXPIRED' && now < goods.endAt)) {
      return { ok: true, view: await this.s.view(known, now) };
    }
    if (!known && now < opensAt(goods)) {
      return { ok: false, reason: 'NOT_STARTED' };
    }
    if (now >= goods.endAt) {
      return { ok: false, reason: 'ENDED' };
    }
    if (goods.mode === 'auto' && Date.now() - this.reportedAt > TICK_MS) {
      // Whether to let this shopper straight in: ask the coordinator if the line is on right now.
      await this.freshReport();
    }
    // A new ticket, or a lapsed one back to the end of the line under its old id.
    const id = known?.id ?? randomId();
    const pre = now < goods.startAt;
    const t: Ticket = {
      id,
      userId,
      key: pre ? null : arrivalKey(now, id),
      joinedAt: now,
      pre,
      round: null,
      admittedAt: null,
      passExpiresAt: null,
      position: null,
      eta: null,
    };
    if (!pre && !this.s.active(goods, now)) {
      // No line right now (auto, quiet): in at once. Round 0 marks admissions made outside the line.
      t.round = 0;
      t.admittedAt = now;
      t.passExpiresAt = now + goods.passSeconds * 1000;
      this.counters.admitted++;
    }
    this.s.book.enter(t);
    this.store.saveTicket(toRow(t));
    this.counters.joined += known ? 0 : 1;
    this.arrivals++;
    this.schedule(now + TICK_MS);
    // A report on its way was built before this ticket: if it says quiet, this one follows it.
    const afterQuiet = t.round === null && (this.quietReported || this.reporting);
    if (Date.now() - this.reportedAt > TICK_MS * 2 || afterQuiet) {
      // The first shopper of a quiet shard: tell the coordinator now (it leaves keys this fresh
      // for its next decision until then, and a quiet report held nobody back), and answer
      // with its figures. That report holds the line at this moment until the next, so the
      // next comes half a tick on, in time for the coordinator's next decision.
      await this.freshReport();
      this.schedule(Date.now() + TICK_MS / 2);
    }
    return { ok: true, view: await this.s.view(t, Date.now()) };
  }

  async status(userId: string, ticketId: string): Promise<TicketView | undefined> {
    const t = this.s.book.byUser.get(userId);
    return t && t.id === ticketId ? this.s.view(t, Date.now()) : undefined;
  }

  /** Joins and token requests seen by an isolate: the demand `auto` watches. Answers whether the line is on. */
  noteArrivals(goods: RoomGoods, n: number): { active: boolean } {
    const now = Date.now();
    this.arrivals += Math.max(0, Math.floor(n));
    this.schedule(now + TICK_MS);
    return { active: this.s.active(goods, now) };
  }

  /** Settled purchases from the order consumer: pushed to their shoppers' connections, kept for a reconnect. */
  deliver(list: ShopperResult[]): number {
    const delivered = pushResults(this.ctx, this.s, this.store, list, Date.now());
    this.counters.messages += delivered;
    return delivered;
  }

  /**
   * The live channel: the edge has checked who this is; the state goes out at once (a reconnect
   * resumes). A channel that joins as it opens (`x-room-join`, GET .../live?join=1) is upgraded
   * first and joins the line right after, as POST .../queue would: its first event is the join's
   * answer (`joined`), so an arrival costs this shard one request instead of two (see
   * OVERDUE_ALARM_MS for what a stream of them did to the alarm). The edge refuses a room not
   * open yet or ended before the upgrade; a join the shard still refuses (settings changed
   * meanwhile) closes the channel with code 4409 and the reason. On a goods without a line the
   * edge's own answer (`edgeAnswer`, from `x-room-joined`) goes first.
   */
  async connect(request: Request, goods: RoomGoods, edgeAnswer: unknown): Promise<Response> {
    const userId = request.headers.get('x-room-user') ?? '';
    const { server, answer } = acceptLive(this.ctx, request, userId);
    if (request.headers.get('x-room-join') === '1') {
      this.ctx.waitUntil(this.joinLive(server, goods, userId));
    } else {
      if (typeof edgeAnswer === 'object' && edgeAnswer !== null && !Array.isArray(edgeAnswer)) {
        send(server, { ...(edgeAnswer as Record<string, unknown>), type: 'joined' });
        this.counters.messages++;
      }
      await this.tell(server, Date.now(), true);
    }
    return answer;
  }

  /** Joins a channel's shopper (see connect): the join's answer, then the state. */
  private async joinLive(ws: WebSocket, goods: RoomGoods, userId: string): Promise<void> {
    try {
      const outcome = await this.join(goods, userId);
      if (!outcome.ok) {
        ws.close(JOIN_REFUSED_CLOSE, outcome.reason);
        return;
      }
      send(ws, { ...(await ticketAnswer(getConfig(this.env).tokenSecret, goods, outcome.view)), type: 'joined' });
      this.counters.messages++;
      await this.tell(ws, Date.now(), true);
    } catch (error) {
      log.warn('room.live_join_failed', { goodsId: goods.goodsId, shard: this.counters.shard, error });
      try {
        ws.close(1011, 'the join failed: join with POST .../queue');
      } catch {
        // already closed
      }
    }
  }

  /** A client asking for its state again (`{"type":"state"}`); anything else is ignored. */
  async message(ws: WebSocket, message: string | ArrayBuffer): Promise<void> {
    if (typeof message === 'string' && message.includes('"state"')) {
      await this.tell(ws, Date.now(), true);
    }
  }

  /** The state (and last result) of one connection's shopper, when due or `force`d. */
  private async tell(ws: WebSocket, now: number, force: boolean): Promise<void> {
    const att = attachmentOf(ws);
    if (!att) {
      return;
    }
    const t = this.s.book.byUser.get(att.u);
    if (t) {
      const view = await this.s.view(t, now);
      const event = stateEvent(view, this.roundInEffect(now));
      if (force || due(att, event, now)) {
        if (send(ws, event)) {
          this.counters.messages++;
          ws.serializeAttachment(sent(att, event, now));
        }
      }
    }
    const last = this.s.results.get(att.u);
    if (force && last) {
      send(ws, resultEvent(last.result));
      this.counters.messages++;
    }
  }

  /** The last admission round in effect at `now`: the ones admitted, and any due but not yet reached by a tick (0 before any). */
  private roundInEffect(now: number): number {
    return Math.max(this.counters.round, ...this.pending.filter((r) => r.at <= now).map((r) => r.round));
  }

  // The tick: hear the coordinator, draw the pre-queue, admit the rounds that are due, tell the connections.

  async tick(): Promise<void> {
    if (this.ticking) {
      return;
    }
    this.ticking = true;
    try {
      await this.tickOnce();
    } finally {
      this.ticking = false;
    }
  }

  /** Runs the tick from this event when the alarm is overdue by more than OVERDUE_ALARM_MS and no tick is running. */
  catchUp(now: number): void {
    if (this.alarmAt !== null && now - this.alarmAt > OVERDUE_ALARM_MS && !this.ticking) {
      this.ctx.waitUntil(this.tick());
    }
  }

  private async tickOnce(): Promise<void> {
    this.alarmAt = null;
    const goods = this.s.goods;
    if (!goods) {
      return;
    }
    if (Date.now() >= goods.endAt + FORGET_AFTER_MS) {
      this.forget();
      return;
    }
    await this.admitDue(Date.now());
    await this.report();
    await this.draw();
    const now = Date.now();
    await this.admitDue(now);
    this.s.placeAll();
    for (const ws of this.ctx.getWebSockets()) {
      await this.tell(ws, now, false);
    }
    this.store.saveState('shard', this.counters);
    // Busy while the line can move: someone may still be admitted, drawn, or buy.
    const line = this.s.hub?.line ?? null;
    const first = this.s.book.waiting[0];
    const hopeful = first !== undefined && (line === null || first < line || first <= this.s.knownCursor);
    const busy =
      this.pending.length > 0 ||
      (now < goods.endAt + TICK_MS * 2 && (hopeful || this.s.book.unkeyed.size > 0 || this.arrivals > 0 || this.s.outstanding(now) > 0));
    if (busy) {
      this.schedule(Math.min(now + TICK_MS, ...this.pending.map((r) => r.at)));
    } else if (now < goods.endAt && first !== undefined) {
      // Only sold-out tickets left: look now and then whether units came back (cancellations, lapsed passes).
      this.schedule(now + SOLD_OUT_TICK_MS);
    } else if (now >= goods.endAt) {
      this.schedule(goods.endAt + FORGET_AFTER_MS);
    }
  }

  /** A sale long over: its tickets and results go (the order history lives in Postgres). */
  private forget(): void {
    this.store.clear();
    this.s.clear();
    this.pending = [];
  }

  /** Sets the one alarm to `at` unless an earlier one is already set. */
  schedule(at: number): void {
    if (this.alarmAt !== null && this.alarmAt <= at) {
      return;
    }
    this.alarmAt = at;
    void this.ctx.storage.setAlarm(at);
  }

  /** A report now, or the one already on its way (waited for on this call's own timer). */
  private async freshReport(): Promise<void> {
    const until = Date.now() + TICK_MS;
    while (this.reporting && Date.now() < until) {
      await sleep(5);
    }
    if (this.quietReported || Date.now() - this.reportedAt > 50) {
      await this.report();
    }
  }

  private async report(): Promise<void> {
    const goods = this.s.goods;
    if (!goods || this.reporting) {
      return;
    }
    this.reporting = true;
    try {
      const { shard, joined, admitted, messages } = this.counters;
      const report = this.s.report(goods, Date.now(), {
        shard,
        arrivals: this.arrivals,
        joined,
        admitted,
        messages,
        live: this.ctx.getWebSockets().length,
      });
      const reply = await callWithin(
        roomHub(this.env, { id: goods.goodsId, locationHint: goods.locationHint }).report(report),
        'the coordinator',
        REPORT_DEADLINE_MS,
      );
      this.reportedAt = Date.now();
      this.quietReported = report.quiet === true;
      this.arrivals -= report.arrivals;
      this.s.hub = reply;
      for (const r of reply.rounds) {
        if (r.round > this.s.knownRound) {
          this.pending.push(r);
          this.s.knownRound = r.round;
          this.s.knownCursor = r.cursor;
        }
      }
      this.s.placeAll();
    } catch (error) {
      log.warn('room.report_failed', { goodsId: goods.goodsId, shard: this.counters.shard, error });
    } finally {
      this.reporting = false;
    }
  }

  /** The pre-queue's keys, once the coordinator has revealed the seed at the start. */
  private async draw(): Promise<void> {
    const seed = this.s.hub?.seed;
    if (!seed || this.s.book.unkeyed.size === 0) {
      return;
    }
    const drawn = await Promise.all([...this.s.book.unkeyed].map(async (t) => ({ t, key: await shuffleKey(seed, t.id) })));
    this.ctx.storage.transactionSync(() => {
      for (const { t, key } of drawn) {
        if (t.key === null) {
          this.s.book.draw(t, key);
          this.store.setKey(t.id, key);
        }
      }
    });
  }

  /** Admits every round whose time has come, each ticket stamped with its own round. */
  private async admitDue(now: number): Promise<void> {
    const goods = this.s.goods;
    const due = this.pending.filter((r) => r.at <= now).sort((a, b) => a.round - b.round);
    if (!goods || due.length === 0) {
      return;
    }
    this.pending = this.pending.filter((r) => r.at > now);
    const admitted: Ticket[] = [];
    this.ctx.storage.transactionSync(() => {
      for (const r of due) {
        const before = admitted.length;
        for (const t of this.s.book.admitUpTo(r.cursor, r.round, r.at, goods.passSeconds * 1000)) {
          this.store.admit(t.id, r.round, r.at, t.passExpiresAt ?? r.at);
          admitted.push(t);
        }
        this.s.admittedLate(admitted.length - before, now - r.at);
        this.counters.round = r.round;
        this.counters.cursor = r.cursor;
      }
      this.counters.admitted += admitted.length;
      this.store.saveState('shard', this.counters);
    });
    for (const t of admitted) {
      for (const ws of this.ctx.getWebSockets(userTag(t.userId))) {
        await this.tell(ws, now, false);
      }
    }
  }
}
