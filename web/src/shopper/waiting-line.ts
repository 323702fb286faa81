import * as z from 'zod/mini';
import { Instant, type Result } from '../shared/contract';

// The shopper's place in a goods' waiting room, kept without polling: one WebSocket to
// GET .../live carries position, admitted, sold_out, expired and the purchase result. When the
// connection drops the line reconnects with backoff (the room sends the state, and the last
// result, on every connect, so a reconnect resumes) and, only while it is down, polls the
// ticket and the result routes. DOM-free: the socket, the HTTP calls and the timers are given,
// so the logic runs under test in Node.

/** The subprotocol the live channel answers with. */
export const LIVE_PROTOCOL = 'seckill-live';
/** Reconnect delays: 1 s, doubling, at most this, with jitter so a crowd does not return together. */
export const RECONNECT_MAX_MS = 15_000;
/** While disconnected the ticket and a pending result are polled this often. */
export const FALLBACK_POLL_MS = 5_000;
/**
 * How long a live channel may take to open before the line gives it up as a drop and tries
 * again with backoff: a socket that neither opens nor closes (a server stuck on its upgrade)
 * would otherwise hold the reconnects for as long as the browser keeps it.
 */
export const OPEN_TIMEOUT_MS = 10_000;

export type LineState = 'WAITING' | 'ADMITTED' | 'SOLD_OUT' | 'EXPIRED';

/** A join or ticket answer (POST .../queue, GET .../queue/:ticket) as the page reads it. */
export const TicketAnswer = z.looseObject({
  ticket: z.string(),
  state: z.enum(['WAITING', 'ADMITTED', 'SOLD_OUT', 'EXPIRED']),
  position: z.number(),
  etaSeconds: z.number(),
  remaining: z.number(),
  pass: z.optional(z.string()),
  expiresAt: z.optional(Instant),
  preQueue: z.optional(z.boolean()),
  drawAt: z.optional(Instant),
});
export type TicketAnswer = z.infer<typeof TicketAnswer>;

const LiveEvent = z.discriminatedUnion('type', [
  z.object({ type: z.literal('position'), position: z.number(), etaSeconds: z.number(), remaining: z.number() }),
  z.object({ type: z.literal('admitted'), expiresAt: Instant, pass: z.string() }),
  z.object({ type: z.literal('sold_out'), remaining: z.optional(z.number()) }),
  z.object({ type: z.literal('expired') }),
  z.object({
    type: z.literal('result'),
    requestId: z.string(),
    status: z.enum(['SUCCESS', 'FAIL']),
    orderId: z.optional(z.string()),
    reason: z.optional(z.string()),
  }),
]);
type LiveEvent = z.infer<typeof LiveEvent>;

/** What the page shows: the state, the place and the stock, and whether the live channel is up. */
export type LineView = {
  state: LineState;
  position: number;
  etaSeconds: number;
  remaining: number | undefined;
  pass: string | undefined;
  expiresAt: number | undefined;
  drawAt: number | undefined;
  connected: boolean;
};

/** The part of a browser WebSocket the line uses. */
export type SocketLike = {
  onopen: ((event: unknown) => void) | null;
  onmessage: ((event: { data: unknown }) => void) | null;
  onclose: ((event: unknown) => void) | null;
  onerror: ((event: unknown) => void) | null;
  close(): void;
};

export type Timer = unknown;

export type LineDeps = {
  openSocket(url: string, protocols: string[]): SocketLike;
  /** GET .../queue/:ticket; undefined when it failed (the next poll tries again). */
  fetchTicket(ticket: string): Promise<TicketAnswer | undefined>;
  /** GET /api/seckill/result/:requestId; undefined when it failed or the result is not settled. */
  fetchResult(requestId: string): Promise<Result | undefined>;
  setTimer(fn: () => void, ms: number): Timer;
  clearTimer(timer: Timer): void;
  random(): number;
};

/** The n-th reconnect's delay (n from 0): 1 s, 2 s, 4 s... at most RECONNECT_MAX_MS, 50-100% of it. */
export function reconnectDelay(attempt: number, random: () => number = Math.random): number {
  const base = Math.min(RECONNECT_MAX_MS, 1000 * 2 ** Math.min(attempt, 10));
  return Math.round(base * (0.5 + random() / 2));
}

/** The live channel's address for a ticket, from the page's own origin (http -> ws). */
export function liveUrl(origin: string, goodsId: number, ticket: string): string {
  const url = new URL(`/api/seckill/goods/${goodsId}/live`, origin);
  url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
  url.searchParams.set('ticket', ticket);
  return url.toString();
}

type Settled = Result & { status: 'SUCCESS' | 'FAIL' };
type Waiter = { requestId: string; resolve: (result: Settled) => void };

export class WaitingLine {
  private view: LineView;
  private socket: SocketLike | undefined;
  private attempts = 0;
  private reconnectTimer: Timer | undefined;
  private openTimer: Timer | undefined;
  private pollTimer: Timer | undefined;
  private stopped = false;
  private readonly results = new Map<string, Settled>();
  private readonly waiters: Waiter[] = [];

  constructor(
    private readonly deps: LineDeps,
    private readonly urlFor: (ticket: string) => string,
    private ticket: string,
    first: TicketAnswer,
    private readonly onChange: (view: LineView) => void,
  ) {
    this.view = {
      state: 'WAITING',
      position: 0,
      etaSeconds: 0,
      remaining: undefined,
      pass: undefined,
      expiresAt: undefined,
      drawAt: undefined,
      connected: false,
    };
    this.take(first);
  }

  get state(): LineView {
    return this.view;
  }

  /** The admission pass for the token route, while it is valid. */
  pass(now: number): string | undefined {
    const v = this.view;
    return v.state === 'ADMITTED' && v.pass && (v.expiresAt === undefined || v.expiresAt > now) ? v.pass : undefined;
  }

  /** Opens the live channel, or takes over `open`, a channel already open for this ticket (joinThroughLive's). */
  start(open?: SocketLike): void {
    this.stopped = false;
    if (open) {
      this.attach(open);
      this.attempts = 0;
      this.set({ connected: true });
      return;
    }
    this.connect();
  }

  /** Closes the channel and stops every timer (sign-out, leaving the page). */
  stop(): void {
    this.stopped = true;
    this.deps.clearTimer(this.reconnectTimer);
    this.deps.clearTimer(this.openTimer);
    this.stopPolling();
    const socket = this.socket;
    this.socket = undefined;
    if (socket) {
      socket.onclose = null;
      socket.close();
    }
    this.set({ connected: false });
  }

  /** A new ticket answer (joining again after an expiry): the line follows it. */
  rejoined(answer: TicketAnswer): void {
    this.ticket = answer.ticket;
    this.take(answer);
  }

  /** The settled result of a purchase: from the live channel, or polled while it is down. */
  awaitResult(requestId: string): Promise<Settled> {
    const known = this.results.get(requestId);
    if (known) {
      return Promise.resolve(known);
    }
    return new Promise((resolve) => {
      this.waiters.push({ requestId, resolve });
      if (!this.view.connected) {
        this.startPolling();
      }
    });
  }

  /** Gives up on a result (the page stops waiting); the channel stays open. */
  forget(requestId: string): void {
    for (let i = this.waiters.length - 1; i >= 0; i--) {
      if (this.waiters[i]?.requestId === requestId) {
        this.waiters.splice(i, 1);
      }
    }
  }

  private connect(): void {
    if (this.stopped) {
      return;
    }
    let socket: SocketLike;
    try {
      socket = this.deps.openSocket(this.urlFor(this.ticket), [LIVE_PROTOCOL]);
    } catch {
      this.dropped();
      return;
    }
    this.attach(socket);
    this.openTimer = this.deps.setTimer(() => {
      if (this.socket === socket) {
        this.socket = undefined;
        socket.onopen = null;
        socket.onmessage = null;
        socket.onclose = null;
        socket.close();
        this.dropped();
      }
    }, OPEN_TIMEOUT_MS);
    socket.onopen = () => {
      this.deps.clearTimer(this.openTimer);
      this.attempts = 0;
      this.stopPolling();
      this.set({ connected: true });
    };
  }

  private attach(socket: SocketLike): void {
    this.socket = socket;
    socket.onmessage = (event) => this.hear(event.data);
    socket.onerror = () => {
      // A close always follows an error; the close handler reconnects.
    };
    socket.onclose = () => {
      if (this.socket === socket) {
        this.socket = undefined;
        this.dropped();
      }
    };
  }

  private dropped(): void {
    this.deps.clearTimer(this.openTimer);
    this.set({ connected: false });
    if (this.stopped) {
      return;
    }
    this.startPolling();
    this.deps.clearTimer(this.reconnectTimer);
    this.reconnectTimer = this.deps.setTimer(() => this.connect(), reconnectDelay(this.attempts++, this.deps.random));
  }

  private hear(data: unknown): void {
    let json: unknown;
    try {
      json = typeof data === 'string' ? JSON.parse(data) : undefined;
    } catch {
      return;
    }
    const parsed = LiveEvent.safeParse(json);
    if (parsed.success) {
      this.apply(parsed.data);
    }
  }

  private apply(event: LiveEvent): void {
    switch (event.type) {
      case 'position':
        this.set({ state: 'WAITING', position: event.position, etaSeconds: event.etaSeconds, remaining: event.remaining });
        break;
      case 'admitted':
        this.set({ state: 'ADMITTED', position: 0, etaSeconds: 0, pass: event.pass, expiresAt: event.expiresAt });
        break;
      case 'sold_out':
        this.set({ state: 'SOLD_OUT', remaining: event.remaining ?? 0 });
        break;
      case 'expired':
        this.set({ state: 'EXPIRED', pass: undefined });
        break;
      case 'result':
        this.settle({ requestId: event.requestId, status: event.status, orderId: event.orderId, reason: event.reason });
        break;
    }
  }

  private take(answer: TicketAnswer): void {
    this.set({
      state: answer.state,
      position: answer.position,
      etaSeconds: answer.etaSeconds,
      remaining: answer.remaining,
      pass: answer.pass,
      expiresAt: answer.expiresAt,
      drawAt: answer.drawAt,
    });
  }

  private settle(result: Settled): void {
    this.results.set(result.requestId, result);
    for (let i = this.waiters.length - 1; i >= 0; i--) {
      const waiter = this.waiters[i];
      if (waiter?.requestId === result.requestId) {
        this.waiters.splice(i, 1);
        waiter.resolve(result);
      }
    }
  }

  private startPolling(): void {
    if (this.pollTimer === undefined && !this.stopped) {
      this.pollTimer = this.deps.setTimer(() => void this.pollOnce(), FALLBACK_POLL_MS);
    }
  }

  private stopPolling(): void {
    this.deps.clearTimer(this.pollTimer);
    this.pollTimer = undefined;
  }

  /** One round of the fallback: the ticket, and each result still awaited; then the next, while still down. */
  private async pollOnce(): Promise<void> {
    this.pollTimer = undefined;
    if (this.view.connected || this.stopped) {
      return;
    }
    const [answer, ...results] = await Promise.all([
      this.deps.fetchTicket(this.ticket),
      ...[...new Set(this.waiters.map((w) => w.requestId))].map((id) => this.deps.fetchResult(id)),
    ]);
    // A reconnect meanwhile is fresher than what the poll read.
    if (this.view.connected || this.stopped) {
      return;
    }
    if (answer) {
      this.take(answer);
    }
    for (const result of results) {
      if (result && (result.status === 'SUCCESS' || result.status === 'FAIL')) {
        this.settle({ ...result, status: result.status });
      }
    }
    this.startPolling();
  }

  private set(change: Partial<LineView>): void {
    this.view = { ...this.view, ...change };
    this.onChange(this.view);
  }
}
