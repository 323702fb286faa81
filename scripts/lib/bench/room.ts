// The bench's queue phase: a goods whose waiting room is always on. Shoppers join the line
// (POST .../queue), hold the live WebSocket (GET .../live?ticket=), and when the room admits
// them, ask for a purchase token with their admission pass and buy. It reports how fast
// shoppers joined, how many live messages a second the room pushed, and how far each admitted
// shopper's promised ETA was from when the room actually let them in.
import WebSocket from 'ws';
import type { HttpClient } from '../load/http-client.ts';
import { percentiles, round } from '../load/metrics.ts';
import { challengeAnswer } from '../load/shoppers.ts';
import type { BenchUser } from './mint.ts';
import type { DecisionCost } from './room-decision.ts';

export type QueuePhase = {
  shoppers: number;
  admitPerSecond: number;
  /** The room's shard count when the bench set one (`--room-shards`); absent: the default. */
  roomShards?: number;
  /** The goods' stock shards when the bench set more than one (`--queue-stock-shards`). */
  stockShards?: number;
  /** One decision of the coordinator over full reports, at the default and the largest shard count (room-decision.ts). */
  coordinator?: DecisionCost[];
  joined: number;
  /** How shoppers joined: `live` as the channel opened (one request to the shard), `post` with the join route and then the channel. */
  joinedWith: 'live' | 'post';
  joinedPerSec: number;
  liveMessages: number;
  liveMessagesPerSec: number;
  admitted: number;
  soldOut: number;
  accepted: number;
  refused: Record<string, number>;
  /** Seconds: actual admission minus the ETA the join promised, counted from its answer (positive: later than promised). */
  etaError: {
    p50AbsS: number | null;
    p90AbsS: number | null;
    meanS: number | null;
    lastTenthMeanAbsS: number | null;
    /** etaErrorByTenth; absent from results saved before it. */
    byTenthS?: number[];
  };
  /** The room's own delays its ETAs took at the end (the stats' `frontLagMs` and `lateMs`); absent from results saved before them. */
  measured?: { frontLagMs: number | null; lateMs: number | null };
  /** How long a join took to answer (the ETA counts from the answer); absent from results saved before it. */
  joinAnsweredMs?: { p50: number | null; p90: number | null };
  /** Admissions a second while the line held at least two seconds' worth the room knew of (rateWhileQueued). */
  admittedWhileQueued: { perSecond: number | null; seconds: number };
  durationS: number;
  timedOut: number;
};

type Shopper = BenchUser & {
  ticket?: string;
  joinedAt: number;
  etaS: number;
  /** When the join's answer, and with it the ETA, reached the shopper: the ETA counts from here. */
  toldAt?: number;
  admittedAt?: number;
  pass?: string;
  done: boolean;
  socket?: WebSocket;
};

/** A shopper's promise: joined (the request sent), told the ETA (its answer in), admitted. */
type Promised = { joinedAt: number; toldAt?: number; etaS: number; admittedAt: number };

/**
 * Seconds between a shopper's admission and the one their ETA promised (positive: later). The ETA
 * counts from the join's answer, which the shopper reads; counted from the request, the join's own
 * time in the crowd (0.1-0.9 s here) read as the room's lateness.
 */
export function etaError(s: Promised): number {
  return (s.admittedAt - (s.toldAt ?? s.joinedAt)) / 1000 - s.etaS;
}

/**
 * The ETA error (admission minus the promise, in seconds; positive: later than promised) of each
 * tenth of the admitted shoppers in the order they joined, the mean of each: where along the line
 * the promise is off (the first tenth waits for the room's first decisions; a place counted short
 * shows as the middle tenths running late; the last tenth as the line's end). Fewer than ten
 * shoppers: none.
 */
export function etaErrorByTenth(shoppers: readonly Promised[]): number[] {
  if (shoppers.length < 10) {
    return [];
  }
  const byJoin = [...shoppers].sort((a, b) => a.joinedAt - b.joinedAt);
  return Array.from({ length: 10 }, (_, k) => {
    const tenth = byJoin.slice(Math.floor((k * byJoin.length) / 10), Math.floor(((k + 1) * byJoin.length) / 10));
    const sum = tenth.reduce((n, s) => n + etaError(s), 0);
    return round(sum / tenth.length, 2);
  });
}

/** A shopper who joined this long ago is known to the room's coordinator (their shard's report, the next decision, and more). */
const KNOWN_AFTER_MS = 3_000;

/**
 * How fast the room let shoppers in while it had a line to take from: admissions per second
 * from the first to the last whole second (counted from the first admission) that began with at
 * least two seconds' worth of `rate` known to the room and not yet admitted (shoppers who joined
 * at least KNOWN_AFTER_MS earlier). Elsewhere the joins, not the room, set the pace. Rounds
 * come about a second apart, so a span of n seconds reads within about one round of the truth.
 * Null with no such second.
 */
export function rateWhileQueued(joinedAt: number[], admittedAt: number[], rate: number): { perSecond: number | null; seconds: number } {
  const joins = [...joinedAt].sort((a, b) => a - b);
  const admissions = [...admittedAt].sort((a, b) => a - b);
  const below = (xs: number[], t: number) => {
    let lo = 0;
    let hi = xs.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if ((xs[mid] ?? 0) < t) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return lo;
  };
  const first = admissions[0];
  const last = admissions[admissions.length - 1];
  if (first === undefined || last === undefined) {
    return { perSecond: null, seconds: 0 };
  }
  let from: number | undefined;
  let to: number | undefined;
  for (let t = first; t + 1_000 <= last; t += 1_000) {
    if (below(joins, t - KNOWN_AFTER_MS) - below(admissions, t) >= 2 * rate) {
      from ??= t;
      to = t + 1_000;
    }
  }
  if (from === undefined || to === undefined) {
    return { perSecond: null, seconds: 0 };
  }
  const seconds = (to - from) / 1_000;
  return { perSecond: round((below(admissions, to) - below(admissions, from)) / seconds), seconds };
}

/** Runs `work(item)` over `items`, `concurrency` at a time. */
export async function pool<T>(items: T[], concurrency: number, work: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(concurrency, items.length) }, async () => {
      for (let item = items[next++]; item !== undefined; item = items[next++]) {
        await work(item);
      }
    }),
  );
}

/** One queue phase on `goodsId` (a goods with `queue: {mode: "always"}` and stock for everyone). */
export async function runQueuePhase(o: {
  http: HttpClient;
  url: string;
  goodsId: number;
  users: BenchUser[];
  admitPerSecond: number;
  connections: number;
  timeoutMs: number;
  /** Headers the live connections carry (the HTTP client has its own). */
  headers?: Record<string, string>;
  /** Join with POST .../queue, then open the channel with the ticket (two requests to the shard), instead of `?join=1`. */
  joinWithPost?: boolean;
}): Promise<{ phase: QueuePhase; accepted: Set<string> }> {
  const shoppers: Shopper[] = o.users.map((u) => ({ ...u, joinedAt: 0, etaS: 0, done: false }));
  const accepted = new Set<string>();
  const refused: Record<string, number> = {};
  const refuse = (s: Shopper, why: string) => {
    refused[why] = (refused[why] ?? 0) + 1;
    s.done = true;
  };
  let liveMessages = 0;
  let firstLiveAt = 0;
  let lastLiveAt = 0;
  const buyers: Shopper[] = [];
  let wake: (() => void) | undefined;

  const admit = (s: Shopper, pass: unknown) => {
    if (s.admittedAt === undefined && typeof pass === 'string') {
      s.admittedAt = Date.now();
      s.pass = pass;
      buyers.push(s);
      wake?.();
    }
  };

  const wsBase = o.url.replace(/^http/, 'ws');
  type Answer = { ticket?: string; state?: string; etaSeconds?: number; pass?: string };
  /** A join's answer (the join route's body, or the `joined` event): the ticket, the ETA, and an admission or sold-out at once. */
  const took = (s: Shopper, body: Answer) => {
    s.ticket = body.ticket;
    s.etaS = body.etaSeconds ?? 0;
    s.toldAt = Date.now();
    if (body.state === 'ADMITTED') {
      admit(s, body.pass);
    } else if (body.state === 'SOLD_OUT') {
      refuse(s, 'sold out in line');
    }
  };
  /**
   * Opens the shopper's live channel: with their ticket right after joining with POST (`join`:
   * false), or joining as it opens (`?join=1` with the JWT, one request to the shard, as the
   * shopper page does). Resolves once the channel is open and, when joining, the join's answer is in.
   */
  const listen = (s: Shopper, join: boolean) =>
    new Promise<void>((resolve) => {
      const path = `${wsBase}/api/seckill/goods/${o.goodsId}/live`;
      const socket = join
        ? new WebSocket(`${path}?join=1`, ['seckill-live', `jwt.${s.jwt}`], { headers: o.headers ?? {} })
        : new WebSocket(`${path}?ticket=${encodeURIComponent(s.ticket ?? '')}`, { headers: o.headers ?? {} });
      s.socket = socket;
      const failed = (why: string) => {
        if (join && s.ticket === undefined && !s.done) {
          refuse(s, why);
        }
        resolve();
      };
      socket.on('open', () => {
        if (!join) {
          resolve();
        }
      });
      socket.on('unexpected-response', (_request, response) => {
        failed(`join ${response.statusCode ?? 'failed'}`);
        socket.terminate();
      });
      // The socket's error code says whose fault (ECONNRESET: the runtime dropped it), not just that it failed.
      socket.on('error', (error: Error & { code?: string }) => failed(`join failed${error.code ? ` (${error.code})` : ''}`));
      socket.on('close', () => failed('join closed'));
      socket.on('message', (data) => {
        liveMessages++;
        lastLiveAt = Date.now();
        firstLiveAt ||= lastLiveAt;
        let event: Answer & { type?: string } = {};
        try {
          event = JSON.parse(String(data)) as typeof event;
        } catch {
          return;
        }
        if (event.type === 'joined') {
          took(s, event);
          resolve();
        } else if (event.type === 'admitted') {
          admit(s, event.pass);
        } else if (event.type === 'sold_out' && s.admittedAt === undefined && !s.done) {
          refuse(s, 'sold out in line');
        }
      });
    });

  // Each shopper joins and opens the live channel at once, so an admission is seen when the room
  // sends it (a channel opened only after every join saw early admissions seconds late, and
  // counted that against the room's ETA).
  const started = Date.now();
  let joinedAll = started;
  await pool(shoppers, o.connections, async (s) => {
    s.joinedAt = Date.now();
    if (!o.joinWithPost) {
      await listen(s, true);
      joinedAll = Math.max(joinedAll, Date.now());
      return;
    }
    const joined = await o.http.post(`/api/seckill/goods/${o.goodsId}/queue`, { headers: { authorization: `Bearer ${s.jwt}` } });
    joinedAll = Math.max(joinedAll, Date.now());
    const body = joined.json as Answer | undefined;
    if (joined.status !== 200 || !body?.ticket) {
      refuse(s, `join ${joined.status}`);
      return;
    }
    took(s, body);
    if (!s.done && s.admittedAt === undefined) {
      await listen(s, false);
    }
  });

  const buy = async (s: Shopper) => {
    const headers = { authorization: `Bearer ${s.jwt}` };
    const challenge = await o.http.post(`/api/seckill/goods/${o.goodsId}/challenge`, { headers });
    const answer = challenge.status === 200 ? await challengeAnswer(challenge.json) : { error: `challenge ${challenge.status}` };
    if (!answer.body) {
      refuse(s, answer.error ?? 'challenge');
      return;
    }
    const token = await o.http.post(`/api/seckill/goods/${o.goodsId}/token`, {
      headers: { ...headers, 'x-admission-pass': s.pass ?? '' },
      json: answer.body,
    });
    const issued = token.json as { token?: string; path?: string } | undefined;
    if (token.status !== 200 || !issued?.token || !issued.path) {
      refuse(s, `token ${token.status}`);
      return;
    }
    const bought = await o.http.post(`/api/seckill/do/${issued.path}`, { headers, json: { goodsId: o.goodsId, token: issued.token } });
    const requestId = bought.status === 202 ? /"requestId":"([^"]+)"/.exec(bought.body)?.[1] : undefined;
    if (requestId) {
      accepted.add(requestId);
      s.done = true;
    } else {
      refuse(s, `purchase ${bought.status}`);
    }
  };

  // Buyers take admitted shoppers as the room lets them in, until everyone is done or time is up.
  const deadline = Date.now() + o.timeoutMs;
  const allDone = () => shoppers.every((s) => s.done);
  await Promise.all(
    Array.from({ length: o.connections }, async () => {
      while (!allDone() && Date.now() < deadline) {
        const s = buyers.shift();
        if (s) {
          await buy(s);
        } else {
          await new Promise<void>((resolve) => {
            const timer = setTimeout(resolve, 50);
            wake = () => {
              clearTimeout(timer);
              resolve();
            };
          });
        }
      }
    }),
  );
  const ended = Date.now();
  for (const s of shoppers) {
    s.socket?.terminate();
  }

  const admittedList = shoppers.filter((s) => s.admittedAt !== undefined).sort((a, b) => (a.admittedAt ?? 0) - (b.admittedAt ?? 0));
  const promises = admittedList.map((s) => ({ joinedAt: s.joinedAt, toldAt: s.toldAt, etaS: s.etaS, admittedAt: s.admittedAt ?? 0 }));
  const errors = promises.map(etaError);
  const answered = percentiles(shoppers.flatMap((s) => (s.toldAt === undefined ? [] : [s.toldAt - s.joinedAt])));
  const abs = errors.map(Math.abs);
  const lastTenth = abs.slice(Math.floor(abs.length * 0.9));
  const mean = (xs: number[]) => (xs.length ? round(xs.reduce((a, b) => a + b, 0) / xs.length, 2) : null);
  const absP = percentiles(abs);
  const joinedCount = shoppers.filter((s) => s.ticket).length;
  const liveSpan = Math.max((lastLiveAt - firstLiveAt) / 1000, 0.001);
  return {
    accepted,
    phase: {
      shoppers: shoppers.length,
      admitPerSecond: o.admitPerSecond,
      joined: joinedCount,
      joinedWith: o.joinWithPost ? 'post' : 'live',
      joinedPerSec: round(joinedCount / Math.max((joinedAll - started) / 1000, 0.001)),
      liveMessages,
      liveMessagesPerSec: round(liveMessages / liveSpan),
      admitted: admittedList.length,
      soldOut: refused['sold out in line'] ?? 0,
      accepted: accepted.size,
      refused,
      etaError: {
        p50AbsS: absP.p50Ms === null ? null : round(absP.p50Ms, 2),
        p90AbsS: absP.p90Ms === null ? null : round(absP.p90Ms, 2),
        meanS: mean(errors),
        lastTenthMeanAbsS: mean(lastTenth),
        byTenthS: etaErrorByTenth(promises),
      },
      joinAnsweredMs: {
        p50: answered.p50Ms === null ? null : Math.round(answered.p50Ms),
        p90: answered.p90Ms === null ? null : Math.round(answered.p90Ms),
      },
      admittedWhileQueued: rateWhileQueued(
        shoppers.filter((s) => s.ticket).map((s) => s.joinedAt),
        admittedList.map((s) => s.admittedAt ?? 0),
        o.admitPerSecond,
      ),
      durationS: round((ended - started) / 1000, 2),
      timedOut: shoppers.filter((s) => !s.done).length,
    },
  };
}
