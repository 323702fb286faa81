// The shopper page's waiting line (web/src/shopper/waiting-line.ts) in Node: live events, the
// reconnect with backoff, the fallback polling only while disconnected, and results by request id.
import { describe, expect, it } from 'vitest';
import type { Result } from '../../web/src/shared/contract';
import { JOIN_LIVE_TIMEOUT_MS, joinThroughLive, joinUrl } from '../../web/src/shopper/live-join';
import { pickable } from '../../web/src/shopper/rules-view';
import {
  FALLBACK_POLL_MS,
  LIVE_PROTOCOL,
  type LineView,
  liveUrl,
  OPEN_TIMEOUT_MS,
  RECONNECT_MAX_MS,
  reconnectDelay,
  type SocketLike,
  type TicketAnswer,
  WaitingLine,
} from '../../web/src/shopper/waiting-line';

class FakeSocket implements SocketLike {
  onopen: ((event: unknown) => void) | null = null;
  onmessage: ((event: { data: unknown }) => void) | null = null;
  onclose: ((event: unknown) => void) | null = null;
  onerror: ((event: unknown) => void) | null = null;
  closed = false;
  constructor(
    readonly url: string,
    readonly protocols: string[],
  ) {}
  open() {
    this.onopen?.({});
  }
  push(event: unknown) {
    this.onmessage?.({ data: JSON.stringify(event) });
  }
  drop() {
    this.onclose?.({});
  }
  close() {
    this.closed = true;
  }
}

/** Timers on a hand-driven clock. */
class Clock {
  now = 0;
  private timers: { at: number; fn: () => void; id: number }[] = [];
  private next = 1;
  set = (fn: () => void, ms: number) => {
    const id = this.next++;
    this.timers.push({ at: this.now + ms, fn, id });
    return id;
  };
  clear = (id: unknown) => {
    this.timers = this.timers.filter((t) => t.id !== id);
  };
  get pending() {
    return this.timers.length;
  }
  async advance(ms: number) {
    const until = this.now + ms;
    for (;;) {
      this.timers.sort((a, b) => a.at - b.at);
      const t = this.timers[0];
      if (!t || t.at > until) {
        break;
      }
      this.timers.shift();
      this.now = t.at;
      t.fn();
      // Let the polls' promises settle.
      await new Promise((resolve) => setImmediate(resolve));
    }
    this.now = until;
  }
}

const WAITING: TicketAnswer = { ticket: 'tk-1', state: 'WAITING', position: 7, etaSeconds: 14, remaining: 10 };

function setup(first: TicketAnswer = WAITING) {
  const clock = new Clock();
  const sockets: FakeSocket[] = [];
  const calls: string[] = [];
  const views: LineView[] = [];
  let ticketAnswer: TicketAnswer | undefined = first;
  let resultAnswer: Result | undefined;
  const line = new WaitingLine(
    {
      openSocket: (url, protocols) => {
        const s = new FakeSocket(url, protocols);
        sockets.push(s);
        return s;
      },
      fetchTicket: async (ticket) => {
        calls.push(`ticket ${ticket}`);
        return ticketAnswer;
      },
      fetchResult: async (requestId) => {
        calls.push(`result ${requestId}`);
        return resultAnswer;
      },
      setTimer: clock.set,
      clearTimer: clock.clear,
      random: () => 1,
    },
    (ticket) => liveUrl('https://shop.example', 9, ticket),
    first.ticket,
    first,
    (v) => views.push(v),
  );
  return {
    line,
    clock,
    sockets,
    calls,
    views,
    setTicket: (a: TicketAnswer) => {
      ticketAnswer = a;
    },
    setResult: (r: Result) => {
      resultAnswer = r;
    },
  };
}

describe('waiting line', () => {
  it('opens the live channel with the ticket and follows position, admitted and results without a request', async () => {
    const t = setup();
    t.line.start();
    const socket = t.sockets[0];
    expect(socket?.url).toBe('wss://shop.example/api/seckill/goods/9/live?ticket=tk-1');
    expect(socket?.protocols).toEqual([LIVE_PROTOCOL]);
    socket?.open();
    expect(t.line.state).toMatchObject({ state: 'WAITING', position: 7, connected: true });

    socket?.push({ type: 'position', position: 3, etaSeconds: 6, remaining: 8 });
    expect(t.line.state).toMatchObject({ position: 3, etaSeconds: 6, remaining: 8 });
    expect(t.line.pass(0)).toBeUndefined();

    socket?.push({ type: 'admitted', expiresAt: new Date(120_000).toISOString(), pass: 'p.ass', round: 2 });
    expect(t.line.state.state).toBe('ADMITTED');
    expect(t.line.pass(60_000)).toBe('p.ass');
    expect(t.line.pass(121_000)).toBeUndefined();

    const result = t.line.awaitResult('r-1');
    socket?.push({ type: 'result', requestId: 'r-0', status: 'FAIL', reason: 'SOLD_OUT' });
    socket?.push({ type: 'result', requestId: 'r-1', status: 'SUCCESS', orderId: 'o-1' });
    await expect(result).resolves.toEqual({ requestId: 'r-1', status: 'SUCCESS', orderId: 'o-1', reason: undefined });
    // A result heard before anyone asked is kept for the ask.
    await expect(t.line.awaitResult('r-0')).resolves.toMatchObject({ status: 'FAIL', reason: 'SOLD_OUT' });
    await t.clock.advance(60_000);
    expect(t.calls).toEqual([]);
  });

  it('ignores what is not an event of the channel', () => {
    const t = setup();
    t.line.start();
    t.sockets[0]?.open();
    t.sockets[0]?.onmessage?.({ data: 'not json' });
    t.sockets[0]?.push({ type: 'position', position: 'ten' });
    t.sockets[0]?.push({ type: 'unknown' });
    expect(t.line.state).toMatchObject({ state: 'WAITING', position: 7 });
  });

  it('says sold out at once and drains the stock to zero', () => {
    const t = setup();
    t.line.start();
    t.sockets[0]?.open();
    t.sockets[0]?.push({ type: 'sold_out', remaining: 0 });
    expect(t.line.state).toMatchObject({ state: 'SOLD_OUT', remaining: 0 });
  });

  it('reconnects with backoff after a drop, polls only while down, and resumes on the new connection', async () => {
    const t = setup();
    t.line.start();
    t.sockets[0]?.open();
    const pending = t.line.awaitResult('r-7');

    t.sockets[0]?.drop();
    expect(t.line.state.connected).toBe(false);
    // The first reconnect after 1 s fails too; the next waits 2 s.
    await t.clock.advance(1_000);
    expect(t.sockets).toHaveLength(2);
    t.sockets[1]?.drop();
    await t.clock.advance(1_999);
    expect(t.sockets).toHaveLength(2);
    await t.clock.advance(1);
    expect(t.sockets).toHaveLength(3);
    t.sockets[2]?.drop();

    // Meanwhile the ticket and the awaited result are polled every FALLBACK_POLL_MS.
    t.setTicket({ ...WAITING, position: 2, etaSeconds: 4 });
    await t.clock.advance(FALLBACK_POLL_MS - 3_000);
    expect(t.calls).toEqual(['ticket tk-1', 'result r-7']);
    expect(t.line.state).toMatchObject({ position: 2, connected: false });

    // Reconnected: the polling stops; the room resends the state and the settled result.
    await t.clock.advance(4_000);
    const socket = t.sockets[3];
    expect(socket).toBeDefined();
    socket?.open();
    expect(t.line.state.connected).toBe(true);
    socket?.push({ type: 'result', requestId: 'r-7', status: 'SUCCESS', orderId: 'o-7' });
    await expect(pending).resolves.toMatchObject({ status: 'SUCCESS', orderId: 'o-7' });
    const polled = t.calls.length;
    await t.clock.advance(60_000);
    expect(t.calls).toHaveLength(polled);
  });

  it('settles a result from the fallback poll when the channel stays down', async () => {
    const t = setup();
    t.line.start();
    t.sockets[0]?.open();
    t.sockets[0]?.drop();
    const pending = t.line.awaitResult('r-9');
    t.setResult({ requestId: 'r-9', status: 'QUEUED' });
    // The reconnect hangs (never opens): the poll goes on meanwhile.
    await t.clock.advance(FALLBACK_POLL_MS);
    t.setResult({ requestId: 'r-9', status: 'FAIL', reason: 'ORDER_FAILED' });
    await t.clock.advance(FALLBACK_POLL_MS);
    await expect(pending).resolves.toMatchObject({ status: 'FAIL', reason: 'ORDER_FAILED' });
    expect(t.calls.filter((c) => c === 'result r-9')).toHaveLength(2);
  });

  it('gives up a channel that neither opens nor closes, polls meanwhile, and tries again with backoff', async () => {
    const t = setup();
    t.line.start();
    // The upgrade hangs: no open, no close.
    await t.clock.advance(OPEN_TIMEOUT_MS - 1);
    expect(t.sockets).toHaveLength(1);
    expect(t.sockets[0]?.closed).toBe(false);
    await t.clock.advance(1);
    expect(t.sockets[0]?.closed).toBe(true);
    expect(t.sockets[0]?.onclose).toBeNull();
    // Given up as a drop: the next channel after 1 s, hanging too, and the ticket polled meanwhile.
    await t.clock.advance(1_000);
    expect(t.sockets).toHaveLength(2);
    await t.clock.advance(FALLBACK_POLL_MS - 1_000);
    expect(t.calls).toEqual(['ticket tk-1']);
    await t.clock.advance(OPEN_TIMEOUT_MS - FALLBACK_POLL_MS + 1_000);
    expect(t.sockets[1]?.closed).toBe(true);
    // The third, 2 s later, opens: the polls stop, and an open channel is never given up.
    await t.clock.advance(2_000);
    expect(t.sockets).toHaveLength(3);
    t.sockets[2]?.open();
    expect(t.line.state.connected).toBe(true);
    const polled = t.calls.length;
    await t.clock.advance(120_000);
    expect(t.sockets).toHaveLength(3);
    expect(t.sockets[2]?.closed).toBe(false);
    expect(t.calls).toHaveLength(polled);
  });

  it('stops everything on stop()', async () => {
    const t = setup();
    t.line.start();
    t.sockets[0]?.open();
    t.line.stop();
    expect(t.sockets[0]?.closed).toBe(true);
    await t.clock.advance(120_000);
    expect(t.sockets).toHaveLength(1);
    expect(t.calls).toEqual([]);
    expect(t.clock.pending).toBe(0);
  });

  it('joins as the channel opens, then follows the same connection; after a drop it reconnects with the ticket', async () => {
    const clock = new Clock();
    const sockets: FakeSocket[] = [];
    const openSocket = (url: string, protocols: string[]) => {
      const socket = new FakeSocket(url, protocols);
      sockets.push(socket);
      return socket;
    };
    const joining = joinThroughLive(
      { openSocket, setTimer: clock.set, clearTimer: clock.clear },
      joinUrl('https://shop.example', 9),
      'j.w.t',
    );
    const socket = sockets[0];
    expect(socket?.url).toBe('wss://shop.example/api/seckill/goods/9/live?join=1');
    expect(socket?.protocols).toEqual([LIVE_PROTOCOL, 'jwt.j.w.t']);
    socket?.open();
    socket?.push({ type: 'joined', ...WAITING, ticketId: 'id-1', queue: 'always' });
    const joined = await joining;
    expect(joined?.answer).toMatchObject({ ticket: 'tk-1', state: 'WAITING', position: 7 });
    expect(socket?.closed).toBe(false);
    expect(clock.pending).toBe(0);

    // The line takes the open connection over: no second connection, the events on it count.
    const views: LineView[] = [];
    const line = new WaitingLine(
      {
        openSocket,
        fetchTicket: async () => undefined,
        fetchResult: async () => undefined,
        setTimer: clock.set,
        clearTimer: clock.clear,
        random: () => 1,
      },
      (ticket) => liveUrl('https://shop.example', 9, ticket),
      joined?.answer.ticket ?? '',
      joined?.answer ?? WAITING,
      (v) => views.push(v),
    );
    line.start(joined?.socket);
    expect(sockets).toHaveLength(1);
    expect(line.state).toMatchObject({ state: 'WAITING', position: 7, connected: true });
    socket?.push({ type: 'position', position: 2, etaSeconds: 3, remaining: 9 });
    expect(line.state).toMatchObject({ position: 2, remaining: 9 });
    socket?.drop();
    await clock.advance(1_000);
    expect(sockets[1]?.url).toBe('wss://shop.example/api/seckill/goods/9/live?ticket=tk-1');
    line.stop();
  });

  it('gives up a joining channel that closes, fails, says something else or nothing, so the page joins with POST', async () => {
    const clock = new Clock();
    const sockets: FakeSocket[] = [];
    const deps = {
      openSocket: (url: string, protocols: string[]) => {
        const socket = new FakeSocket(url, protocols);
        sockets.push(socket);
        return socket;
      },
      setTimer: clock.set,
      clearTimer: clock.clear,
    };
    const url = joinUrl('http://127.0.0.1:8787', 3);
    expect(url).toBe('ws://127.0.0.1:8787/api/seckill/goods/3/live?join=1');
    // Refused before the upgrade: the browser only sees the close.
    const refused = joinThroughLive(deps, url, 'jwt');
    sockets[0]?.drop();
    await expect(refused).resolves.toBeUndefined();
    // A first event that is not the join's answer (a server of an earlier build ignores join=1).
    const older = joinThroughLive(deps, url, 'jwt');
    sockets[1]?.push({ type: 'position', position: 1, etaSeconds: 1, remaining: 1 });
    await expect(older).resolves.toBeUndefined();
    expect(sockets[1]?.closed).toBe(true);
    const garbled = joinThroughLive(deps, url, 'jwt');
    sockets[2]?.push({ type: 'joined', state: 'SOMEWHERE' });
    await expect(garbled).resolves.toBeUndefined();
    // Silence: given up after JOIN_LIVE_TIMEOUT_MS.
    const silent = joinThroughLive(deps, url, 'jwt');
    await clock.advance(JOIN_LIVE_TIMEOUT_MS);
    await expect(silent).resolves.toBeUndefined();
    expect(sockets[3]?.closed).toBe(true);
    // A browser that cannot open the socket at all.
    const none = joinThroughLive(
      {
        ...deps,
        openSocket: () => {
          throw new Error('blocked');
        },
      },
      url,
      'jwt',
    );
    await expect(none).resolves.toBeUndefined();
    expect(clock.pending).toBe(0);
  });

  it('backs off 1 s, 2 s, 4 s... up to the cap, with jitter below it', () => {
    expect([0, 1, 2, 3].map((n) => reconnectDelay(n, () => 1))).toEqual([1_000, 2_000, 4_000, 8_000]);
    expect(reconnectDelay(10, () => 1)).toBe(RECONNECT_MAX_MS);
    expect(reconnectDelay(10, () => 0)).toBe(RECONNECT_MAX_MS / 2);
    expect(liveUrl('http://127.0.0.1:8787', 3, 'a.b')).toBe('ws://127.0.0.1:8787/api/seckill/goods/3/live?ticket=a.b');
  });
});

describe('sale rules on the page', () => {
  it('offers what the shopper may still buy, at least one', () => {
    expect(pickable(undefined, undefined)).toBe(1);
    expect(pickable(5, undefined)).toBe(5);
    expect(pickable(5, 2)).toBe(3);
    expect(pickable(5, 9)).toBe(1);
    expect(pickable(500, 0)).toBe(100);
    // Never more than the goods has left.
    expect(pickable(5, 1, 2)).toBe(2);
    expect(pickable(5, 1, 0)).toBe(1);
  });
});
