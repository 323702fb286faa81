// The sale's crowd in one phase, paced over the phase's time so a fault meets purchases in
// flight: honest buyers through the whole flow (the line of a phase with a waiting room,
// challenge, token, purchase with an Idempotency-Key; an answer lost to a fault is sent again
// with the same key, and a share of accepted purchases are sent twice anyway), latecomers
// after the selling window, accepted shoppers trying again, and hostile requests (replayed and
// stolen tokens, bursts over the limits from one address, malformed requests). Accepted
// purchases are polled until final by one poller for the whole run.

import { heldReadTimeoutMs, RESULT_WAIT_SECONDS, resultReadPath } from '../../../web/src/shopper/pacing.ts';
import { TicketAnswer } from '../../../web/src/shopper/waiting-line.ts';
import { timeOrderedKey } from '../../../workers/kernel/time-order.ts';
import type { Minter } from '../bench/mint.ts';
import { read } from '../load/contract.ts';
import type { Answer, HttpClient } from '../load/http-client.ts';
import { sendMalformed } from '../load/malformed.ts';
import { retryable } from '../load/replay.ts';
import { challengeAnswer } from '../load/shoppers.ts';
import { waitAsThePage } from './line.ts';
import type { PhasePlan } from './plan.ts';
import type { Accepted, Category, PhaseTally, ResultStatus } from './tally.ts';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const newKey = () => timeOrderedKey();

/** How a shopper's requests are sent: its JWT, and its own address (Miniflare passes cf-connecting-ip through). */
function as(s: { jwt: string; ip: string }): Record<string, string> {
  return { authorization: `Bearer ${s.jwt}`, 'cf-connecting-ip': s.ip };
}

let addresses = 0;
/** A client address of its own for every shopper, as a crowd of thousands has (10.0.0.0/8). */
function nextAddress(): string {
  const n = ++addresses;
  return `10.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255}`;
}

/** Sends `send` again while it gets an answer worth retrying (no answer, 429, BUSY), as the shopper page does. */
async function withRetries(tally: PhaseTally, category: Category, what: string, send: () => Promise<Answer>, tries = 6): Promise<Answer> {
  let answer = await send();
  tally.record(category, what, answer);
  for (let i = 1; i < tries && retryable(answer); i++) {
    const after = Number(answer.headers['retry-after'] ?? 1);
    await sleep(Math.min(3_000, Math.max(500, (Number.isFinite(after) ? after : 1) * 1000)));
    answer = await send();
    tally.record(category, `${what} (sent again)`, answer);
  }
  return answer;
}

/**
 * Follows every accepted purchase's result until SUCCESS or FAIL, for the whole run, as the
 * shopper page does: at once after the 202 with `?wait=`, each read held by the stock object
 * until the order is written (the mirror's QUEUED answered at once), the next read starting
 * `everyMs` after the last was sent. A fault under a held read (the stock shard reset, Redis
 * or Postgres away) is what the crowd's results then meet. Give it an HTTP client of its own:
 * held reads must not take the sockets the crowd's purchases need.
 */
export class ResultPoller {
  private readonly pending = new Map<string, { entry: Accepted; tally: PhaseTally }>();
  private readonly following = new Set<Promise<void>>();
  private stopped = false;

  constructor(
    private readonly http: HttpClient,
    private readonly everyMs: number,
    private readonly waitSeconds = RESULT_WAIT_SECONDS,
  ) {}

  add(entry: Accepted, tally: PhaseTally): void {
    if (this.stopped || this.pending.has(entry.requestId)) {
      return;
    }
    const p = { entry, tally };
    this.pending.set(entry.requestId, p);
    const run: Promise<void> = this.follow(p).finally(() => this.following.delete(run));
    this.following.add(run);
  }

  get unresolved(): number {
    return this.pending.size;
  }

  /** Accepted purchases of one phase not final yet. */
  unresolvedOf(tally: PhaseTally): number {
    return [...this.pending.values()].filter((p) => p.tally === tally).length;
  }

  /**
   * One result read, as its owner (held up to `waitSeconds` for the final answer): updates the
   * entry and returns the status, or undefined when the read failed.
   */
  async poll(entry: Accepted, tally: PhaseTally, waitSeconds = 0): Promise<ResultStatus | undefined> {
    const held = waitSeconds > 0;
    const answer = await this.http.get(resultReadPath(entry.requestId, waitSeconds), {
      headers: as(entry),
      ...(held ? { timeoutMs: heldReadTimeoutMs(waitSeconds) } : {}),
    });
    tally.record('poll', 'result', answer);
    if (held && answer.status === 200 && answer.ms >= 1_000) {
      tally.heldReads++;
    }
    const result = read.result(answer.json);
    if (answer.status !== 200 || !result) {
      return undefined;
    }
    entry.status = result.status;
    entry.orderId = result.orderId;
    entry.reason = result.reason;
    return result.status;
  }

  /** Ends the following once the reads in flight answer (a held one within its wait). */
  async stop(): Promise<void> {
    this.stopped = true;
    await Promise.all(this.following);
  }

  private async follow(p: { entry: Accepted; tally: PhaseTally }): Promise<void> {
    while (!this.stopped) {
      const sentAt = Date.now();
      const status = await this.poll(p.entry, p.tally, this.waitSeconds);
      if (status === 'SUCCESS' || status === 'FAIL') {
        this.pending.delete(p.entry.requestId);
        return;
      }
      await sleep(Math.max(0, this.everyMs - (Date.now() - sentAt)));
    }
  }
}

export type CrowdContext = {
  /** The shoppers' client. */
  http: HttpClient;
  /** The hostile acts' client, its sockets apart from the shoppers'. */
  hostileHttp: HttpClient;
  minter: Minter;
  goodsId: number;
  phase: PhasePlan;
  tally: PhaseTally;
  poller: ResultPoller;
  retryShare: number;
  maxInFlight: number;
};

type Shopper = { userId: string; jwt: string; ip: string };
type Ready = Shopper & { token: string; path: string };

/** How long a shopper waits in a phase's line before giving up. */
const LINE_PATIENCE_MS = 180_000;

/**
 * A phase with a waiting room: the shopper waits in its line as the page does (line.ts: the
 * live channel, opened again when it drops, the ticket polled while it is down); the admission
 * pass, or undefined when the line sold out, the pass lapsed, or patience ran out. A join with
 * POST .../queue that meets a room object restarting (503) is sent again, as the page does.
 */
async function waitInLine(c: CrowdContext, s: Shopper, category: Category): Promise<string | undefined> {
  const line = {
    http: c.http,
    goodsId: c.goodsId,
    counts: c.tally.line,
    record: (what: string, answer: Answer) => c.tally.record(category, what, answer),
    patienceMs: LINE_PATIENCE_MS,
  };
  const view = await waitAsThePage(line, s, async () => {
    const joined = await withRetries(c.tally, category, 'join the line', () =>
      c.http.post(`/api/seckill/goods/${c.goodsId}/queue`, { headers: as(s) }),
    );
    const ticket = TicketAnswer.safeParse(joined.json);
    return joined.status === 200 && ticket.success ? ticket.data : undefined;
  });
  return view?.state === 'ADMITTED' ? view.pass : undefined;
}

/** (The line, then) challenge, answer, token: a shopper ready to buy, or undefined when refused on the way (SOLD_OUT at the token, ...). */
async function prepare(c: CrowdContext, s: Shopper, category: Category): Promise<Ready | undefined> {
  const pass = c.phase.queue ? await waitInLine(c, s, category) : undefined;
  if (c.phase.queue && !pass) {
    return undefined;
  }
  const h = as(s);
  const challenge = await withRetries(c.tally, category, 'challenge', () =>
    c.http.post(`/api/seckill/goods/${c.goodsId}/challenge`, { headers: h }),
  );
  if (challenge.status !== 200) {
    return undefined;
  }
  const solved = await challengeAnswer(challenge.json);
  if (!solved.body) {
    throw new Error(solved.error);
  }
  const body = solved.body;
  const token = await withRetries(c.tally, category, 'token', () =>
    c.http.post(`/api/seckill/goods/${c.goodsId}/token`, { headers: { ...h, ...(pass ? { 'x-admission-pass': pass } : {}) }, json: body }),
  );
  const issued = read.purchaseToken(token.json);
  return token.status === 200 && issued ? { ...s, token: issued.token, path: issued.path } : undefined;
}

function purchase(c: CrowdContext, r: Ready, key: string): Promise<Answer> {
  return c.http.post(`/api/seckill/do/${r.path}`, {
    headers: { ...as(r), 'idempotency-key': key },
    json: { goodsId: c.goodsId, token: r.token },
  });
}

function noteAccepted(c: CrowdContext, answer: Answer, r: Ready): void {
  const entry = c.tally.accept(answer, r);
  if (entry) {
    c.poller.add(entry, c.tally);
  }
}

/** An honest shopper: the whole flow, lost answers sent again with the same key. */
async function shop(c: CrowdContext, s: Shopper, category: Category): Promise<void> {
  const ready = await prepare(c, s, category);
  if (!ready) {
    return;
  }
  const key = newKey();
  const first = await withRetries(c.tally, category, 'purchase', () => purchase(c, ready, key));
  noteAccepted(c, first, ready);
  if (Math.random() < c.retryShare) {
    // The answer arrived but the page never saw it: the same click again, owed the same answer.
    const again = await purchase(c, ready, key);
    c.tally.record('retry', 'purchase (same key)', again);
    c.tally.compareRetry(first, again);
    noteAccepted(c, again, ready);
  }
}

const HOSTILE_KINDS = ['malformed', 'replayed-token', 'malformed', 'stolen-token', 'malformed', 'burst'] as const;

/** One hostile act; every request of it must be refused, but for the one purchase a burst may win. */
async function hostile(crowd: CrowdContext, n: number, mallory: Shopper, victim: Shopper): Promise<void> {
  const c = { ...crowd, http: crowd.hostileHttp };
  const kind = HOSTILE_KINDS[n % HOSTILE_KINDS.length] ?? 'malformed';
  const accepted = [...c.tally.accepted.values()];
  const spent = accepted[n % Math.max(1, accepted.length)];
  if (kind === 'replayed-token' && spent) {
    // A spent token and its path, sent again with a fresh key, as a bot replaying a capture would.
    const answer = await purchase(c, spent, newKey());
    c.tally.recordHostile(kind, answer);
  } else if (kind === 'stolen-token') {
    const ready = await prepare(c, victim, 'hostile');
    if (ready) {
      c.tally.recordHostile(kind, await purchase(c, { ...ready, jwt: mallory.jwt, userId: mallory.userId }, newKey()));
    }
  } else if (kind === 'burst') {
    // Far over the per-address limits from one address, then one token spent eight times at once.
    const flood = await Promise.all(
      Array.from({ length: 25 }, () => c.http.post(`/api/seckill/goods/${c.goodsId}/challenge`, { headers: as(mallory) })),
    );
    for (const a of flood) {
      c.tally.record('hostile', 'burst challenge', a);
    }
    const ready = await prepare(c, mallory, 'hostile');
    if (ready) {
      const answers = await Promise.all(Array.from({ length: 8 }, () => purchase(c, ready, newKey())));
      const wins = answers.filter((a) => a.status === 202);
      for (const a of answers.filter((x) => x.status !== 202)) {
        c.tally.recordHostile(kind, a);
      }
      for (const a of wins) {
        c.tally.record('hostile', kind, a);
        noteAccepted(c, a, ready);
      }
      if (wins.length > 1) {
        c.tally.noteLetThrough(`burst: one token accepted ${wins.length} times`);
      }
    }
  } else {
    // Sent without an address of its own: every malformed request comes from 127.0.0.1, the local client.
    const { kind: what, answer } = await sendMalformed({ http: c.http, goodsId: c.goodsId, jwt: mallory.jwt });
    c.tally.recordHostile(`malformed ${what}`, answer);
  }
}

/** Times spread evenly over [from, to) seconds, jittered within each slot. */
function spread(count: number, fromS: number, toS: number): number[] {
  return Array.from({ length: count }, (_, i) => (fromS + ((i + Math.random()) / Math.max(1, count)) * (toS - fromS)) * 1000);
}

/** Runs the phase's crowd from now until its end; resolves when every shopper is done. */
export async function runCrowd(c: CrowdContext): Promise<void> {
  const p = c.phase;
  const people = async (prefix: string, count: number): Promise<Shopper[]> =>
    (await c.minter.users(`${p.key}-${prefix}`, count)).map((u) => ({ ...u, ip: nextAddress() }));
  const [buyers, latecomers, mallories, victims] = await Promise.all([
    people('buyer', p.buyers),
    people('late', p.latecomers),
    people('mallory', p.hostile),
    people('victim', p.hostile),
  ]);
  const endS = Math.max(p.sellS + 1, p.lengthS - 1);
  const jobs: { atMs: number; run: () => Promise<void> }[] = [
    ...spread(buyers.length, 0, p.sellS).map((atMs, i) => ({ atMs, run: () => shop(c, buyers[i] as Shopper, 'buyer') })),
    ...spread(latecomers.length, p.sellS * 0.75, endS).map((atMs, i) => ({
      atMs,
      run: () => shop(c, latecomers[i] as Shopper, 'latecomer'),
    })),
    ...spread(p.again, p.sellS * 0.5, endS).map((atMs, i) => ({
      atMs,
      run: async () => {
        const holders = [...c.tally.accepted.values()];
        const again = holders[(i * 7) % Math.max(1, holders.length)];
        if (again) {
          await shop(c, again, 'again');
        }
      },
    })),
    ...spread(p.hostile, 0, endS).map((atMs, i) => ({
      atMs,
      run: () => hostile(c, i, mallories[i] as Shopper, victims[i] as Shopper),
    })),
  ].sort((a, b) => a.atMs - b.atMs);

  const started = Date.now();
  let inFlight = 0;
  const running: Promise<void>[] = [];
  for (const job of jobs) {
    const wait = started + job.atMs - Date.now();
    if (wait > 0) {
      await sleep(wait);
    }
    while (inFlight >= c.maxInFlight) {
      await sleep(5);
    }
    inFlight++;
    running.push(
      job.run().finally(() => {
        inFlight--;
      }),
    );
  }
  await Promise.all(running);
}
