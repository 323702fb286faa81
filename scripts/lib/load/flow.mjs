// The shopper flow under load. `concurrency` virtual shoppers share the work:
//
//   prepare  POST .../challenge, answer it, POST .../token  -> a ready shopper (token + hidden path)
//   buy      POST /api/seckill/do/:path with an Idempotency-Key (maybe sent twice: a retry)
//   poll     GET /api/seckill/result/:requestId until SUCCESS or FAIL (its own small pool)
//
// Purchase tokens live 60 s, so they are never made far ahead: before the doors open the
// shoppers of the first wave (`lookahead` of them) answer their challenge, as a crowd waiting
// on the page does; then every virtual shopper buys when a ready shopper is waiting and
// prepares the next one otherwise, so no more than `lookahead` tokens are ever waiting and
// none waits longer than it takes to send the purchases in front of it. A token that got
// older than TOKEN_MAX_AGE_MS anyway (a very slow deployment) is dropped and prepared again.
import { randomBytes } from 'node:crypto';
import { outcomeKey } from './http-client.mjs';
import { sendMalformed } from './malformed.mjs';
import { recorder } from './metrics.mjs';
import { challengeAnswer } from './shoppers.mjs';

const TOKEN_MAX_AGE_MS = 40_000;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const bearer = (jwt) => ({ authorization: `Bearer ${jwt}` });

/**
 * Which shopper makes the next purchase attempt: new shoppers in order, with a share coming
 * back for another try. Without a request count or a duration it ends when every shopper has
 * tried once; with one, shoppers keep coming back once all have tried.
 */
function attemptPlan(shoppers, { duplicates, requests }) {
  const tried = [];
  let fresh = 0;
  let issued = 0;
  let deadline;
  let exhausted = false;
  return {
    setDeadline(at) {
      deadline = at;
    },
    get done() {
      return exhausted || (requests !== undefined && issued >= requests) || (deadline !== undefined && Date.now() >= deadline);
    },
    next() {
      if (this.done) {
        return undefined;
      }
      const bounded = requests !== undefined || deadline !== undefined;
      const again = tried.length > 0 && (Math.random() < duplicates || (fresh >= shoppers.length && bounded));
      if (!again && fresh >= shoppers.length) {
        exhausted = true;
        return undefined;
      }
      issued++;
      if (again) {
        return { shopper: shoppers[tried[Math.floor(Math.random() * tried.length)]], duplicate: true };
      }
      tried.push(fresh);
      return { shopper: shoppers[fresh++], duplicate: false };
    },
  };
}

/**
 * Runs the load and returns what every request answered.
 * @param {{ http: ReturnType<typeof import("./http-client.mjs").httpClient>, goodsId: number, shoppers: {userId: string, jwt: string}[], concurrency: number,
 *   durationS?: number, requests?: number, duplicates: number, retries: number, malformed: number,
 *   lookahead: number, pollIntervalMs: number, settleTimeoutMs: number, turnstileToken?: string,
 *   onTick?: (progress: object) => void }} o
 */
export async function runShopperLoad(o) {
  const steps = {
    challenge: recorder(),
    token: recorder(),
    purchase: recorder(),
    retry: recorder(),
    result: recorder(),
    malformed: recorder(),
  };
  const malformedByKind = {};
  const accepted = new Map();
  const idempotency = { retries: 0, notCompared: 0, mismatches: 0, examples: [] };
  const ready = [];
  // Accepted requests waiting for their next result poll; in due order, as all wait the same interval.
  const pollQueue = [];
  let polling = 0;
  let preparing = 0;
  let inFlight = 0;
  let loadDone = false;
  let openedAt = 0;
  let closedAt = 0;
  let requests = 0;
  let attemptsDone = 0;

  const send = async (step, fn) => {
    inFlight++;
    try {
      const answer = await fn();
      requests++;
      steps[step].record(answer.ms, outcomeKey(answer));
      return answer;
    } finally {
      inFlight--;
    }
  };

  async function prepare(slot) {
    const { shopper } = slot;
    const challenge = await send('challenge', () =>
      o.http.post(`/api/seckill/goods/${o.goodsId}/challenge`, { headers: bearer(shopper.jwt) }),
    );
    if (challenge.status !== 200) {
      attemptsDone++;
      return;
    }
    const answer = await challengeAnswer(challenge.json, { turnstileToken: o.turnstileToken });
    if (answer.error) {
      throw new Error(answer.error);
    }
    const token = await send('token', () =>
      o.http.post(`/api/seckill/goods/${o.goodsId}/token`, { headers: bearer(shopper.jwt), json: answer.body }),
    );
    if (token.status === 200) {
      ready.push({ ...slot, token: token.json.token, path: token.json.path, at: Date.now(), key: randomBytes(12).toString('base64url') });
    } else {
      attemptsDone++;
    }
  }

  async function buy(slot) {
    const init = { headers: { ...bearer(slot.shopper.jwt), 'idempotency-key': slot.key }, json: { goodsId: o.goodsId, token: slot.token } };
    const first = await send('purchase', () => o.http.post(`/api/seckill/do/${slot.path}`, init));
    noteAccepted(slot, first);
    if (Math.random() < o.retries) {
      // The same click sent again (a flaky network, an impatient shopper): the same answer is owed.
      const again = await send('retry', () => o.http.post(`/api/seckill/do/${slot.path}`, init));
      idempotency.retries++;
      checkReplay(first, again);
      noteAccepted(slot, again);
    }
    attemptsDone++;
  }

  function noteAccepted(slot, answer) {
    const requestId = answer.status === 202 ? answer.json?.requestId : undefined;
    if (typeof requestId === 'string' && !accepted.has(requestId)) {
      const entry = {
        requestId,
        userId: slot.shopper.userId,
        jwt: slot.shopper.jwt,
        status: 'QUEUED',
        nextPollAt: Date.now() + o.pollIntervalMs,
      };
      accepted.set(requestId, entry);
      pollQueue.push(entry);
    }
  }

  /** 202, or a refusal the goods' object decided: what a retry with the same key must get again. */
  const decided = (a) => [202, 409, 410, 423, 425].includes(a.status);

  function checkReplay(first, again) {
    // Answers the edge gives before the object is asked (429, 503 BUSY, a lost connection) are
    // not decisions; a retry may get something else, and may itself be refused at the edge.
    if (!decided(first) || again.status === 0 || again.status === 429 || again.status === 503 || again.json?.error?.code === 'BANNED') {
      idempotency.notCompared++;
      return;
    }
    const same = again.status === first.status && (first.status !== 202 || again.json?.requestId === first.json?.requestId);
    if (!same) {
      idempotency.mismatches++;
      if (idempotency.examples.length < 5) {
        idempotency.examples.push({ first: outcomeKey(first), again: outcomeKey(again) });
      }
    }
  }

  async function malformedOne() {
    const shopper = o.shoppers[Math.floor(Math.random() * o.shoppers.length)];
    inFlight++;
    try {
      const { kind, answer } = await sendMalformed({ http: o.http, goodsId: o.goodsId, jwt: shopper.jwt });
      requests++;
      const key = outcomeKey(answer);
      steps.malformed.record(answer.ms, key);
      malformedByKind[kind] ??= {};
      malformedByKind[kind][key] = (malformedByKind[kind][key] ?? 0) + 1;
    } finally {
      inFlight--;
    }
  }

  const plan = attemptPlan(o.shoppers, { duplicates: o.duplicates, requests: o.requests });

  /** The next piece of work for a virtual shopper, or undefined when there is none right now. */
  function nextJob() {
    if (!plan.done && o.malformed > 0 && Math.random() < o.malformed) {
      return () => malformedOne();
    }
    const slot = ready.shift();
    if (slot) {
      if (Date.now() - slot.at <= TOKEN_MAX_AGE_MS) {
        return () => buy(slot);
      }
      return () => prepareCounted({ shopper: slot.shopper, duplicate: slot.duplicate });
    }
    if (preparing + ready.length < o.lookahead) {
      const next = plan.next();
      if (next) {
        return () => prepareCounted(next);
      }
    }
    return undefined;
  }

  function prepareCounted(slot) {
    preparing++;
    return prepare(slot).finally(() => {
      preparing--;
    });
  }

  async function shopperLoop() {
    for (;;) {
      const job = nextJob();
      if (job) {
        await job();
      } else if (preparing === 0 && ready.length === 0 && plan.done) {
        return;
      } else {
        await sleep(2);
      }
    }
  }

  // Results are polled by their own pool, as each shopper page polls its own request.
  async function pollLoop(stopAt) {
    for (;;) {
      const head = pollQueue[0];
      if (!head || head.nextPollAt > Date.now()) {
        if (loadDone && ((pollQueue.length === 0 && polling === 0) || Date.now() > stopAt())) {
          return;
        }
        await sleep(head ? Math.min(50, head.nextPollAt - Date.now()) : 20);
        continue;
      }
      pollQueue.shift();
      polling++;
      const answer = await send('result', () => o.http.get(`/api/seckill/result/${head.requestId}`, { headers: bearer(head.jwt) }));
      polling--;
      const status = answer.json?.status;
      if (answer.status === 200 && (status === 'SUCCESS' || status === 'FAIL')) {
        head.status = status;
        head.orderId = answer.json.orderId;
        head.reason = answer.json.reason;
      } else {
        head.nextPollAt = Date.now() + o.pollIntervalMs;
        pollQueue.push(head);
      }
    }
  }

  // The crowd before the doors open: the first wave answers its captcha first.
  const started = Date.now();
  const wave = Math.max(1, o.lookahead);
  let waveIssued = 0;
  await Promise.all(
    Array.from({ length: Math.min(o.concurrency, wave) }, async () => {
      while (waveIssued < wave) {
        waveIssued++;
        const slot = plan.next();
        if (!slot) {
          return;
        }
        await prepareCounted(slot);
      }
    }),
  );
  openedAt = Date.now();
  if (o.durationS !== undefined) {
    plan.setDeadline(openedAt + o.durationS * 1000);
  }
  const ticker = setInterval(() => o.onTick?.(progress()), 1000);
  let settleUntil = Number.POSITIVE_INFINITY;
  const pollers = Array.from({ length: Math.max(1, Math.ceil(o.concurrency / 10)) }, () => pollLoop(() => settleUntil));
  try {
    await Promise.all(Array.from({ length: o.concurrency }, shopperLoop));
    closedAt = Date.now();
    settleUntil = closedAt + o.settleTimeoutMs;
  } catch (error) {
    settleUntil = 0;
    throw error;
  } finally {
    // On a failure too: the pollers must end, or the process never would.
    loadDone = true;
    clearInterval(ticker);
    await Promise.all(pollers);
  }

  function progress() {
    return {
      elapsedS: (Date.now() - (openedAt || started)) / 1000,
      requests,
      attempts: attemptsDone,
      inFlight,
      ready: ready.length,
      purchases: { ...steps.purchase.outcomes },
      accepted: accepted.size,
      unresolved: pollQueue.length + polling,
    };
  }

  return {
    startedAt: new Date(started).toISOString(),
    preparedFirstWaveMs: openedAt - started,
    loadMs: closedAt - openedAt,
    requests,
    attempts: attemptsDone,
    steps: Object.fromEntries(Object.entries(steps).map(([k, r]) => [k, r.summary()])),
    malformedByKind,
    accepted: [...accepted.values()].map(({ jwt: _jwt, nextPollAt: _n, ...r }) => r),
    acceptedJwts: new Map([...accepted.values()].map((r) => [r.requestId, r.jwt])),
    idempotency,
  };
}
