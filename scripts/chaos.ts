#!/usr/bin/env tsx
// `npm run chaos`: the Worker on a PostgreSQL and a redis-server of its own, a sale of a few
// thousand shoppers, and one fault per phase (each phase its own goods): Postgres stopped for
// longer than the queue's retries last, redis-server killed, the goods' object reset, queue
// sends failing, duplicate deliveries, the consumer failing after its write, the waiting room's
// and the edge's objects reset. Then it waits until everything is quiet and judges every goods
// by the invariants of DESIGN.md.
// See CHAOS_USAGE in lib/chaos/plan.ts and docs/chaos.md.
import { writeFile } from 'node:fs/promises';
import pg from 'pg';
import { collectFacts } from './lib/chaos/collect.ts';
import { ResultPoller, runCrowd } from './lib/chaos/crowd.ts';
import { actFault, type FaultLog } from './lib/chaos/faults.ts';
import { CHAOS_USAGE, type ChaosOptions, type ChaosPlan, chaosPlan, describeSchedule, parseChaosOptions } from './lib/chaos/plan.ts';
import { type ChaosStack, productionQueueSchedule, startChaosStack } from './lib/chaos/stack.ts';
import { clock, PhaseTally, type ResultStatus } from './lib/chaos/tally.ts';
import { describeLine, exitCode, faultEvidence, formatVerdict, judgePhase } from './lib/chaos/verdict.ts';
import { type AdminApi, adminApi } from './lib/load/admin.ts';
import { read } from './lib/load/contract.ts';
import { httpClient } from './lib/load/http-client.ts';

const say = (line: string) => process.stderr.write(`${line}\n`);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const seconds = (since: number) => Math.round((Date.now() - since) / 1000);

/** Heads the lines a verbose run prints around its requests without an answer (.ci/run looks for it). */
const AROUND_UNANSWERED = "the Worker's and the runtime's lines around the requests without an answer";
const AROUND_MS = 2_000;

type Sale = { goodsId: number; tally: PhaseTally; faultLog?: FaultLog; workerEvents?: Record<string, number> };

async function createGoods(stack: ChaosStack, plan: ChaosPlan): Promise<Sale[]> {
  const now = Date.now();
  const sales: Sale[] = [];
  for (const [i, phase] of plan.phases.entries()) {
    const answer = await stack.http.post('/admin/goods', {
      headers: { authorization: `Bearer ${stack.adminToken}` },
      json: {
        activityId: 9_100 + i,
        title: `Chaos ${phase.key}: ${phase.title}`,
        priceCents: 100,
        stock: phase.stock,
        ...(plan.shards > 1 ? { shards: plan.shards } : {}),
        startAt: now - 1_000,
        endAt: now + 6 * 3600_000,
        // No order times out during the run: every unit stays where the faults left it.
        payTimeoutSeconds: plan.payTimeoutSeconds,
        ...(phase.queue ? { queue: { mode: 'always', ...phase.queue } } : {}),
        ...(phase.limitScope ? { limitScope: phase.limitScope } : {}),
      },
    });
    const goods = read.goods(answer.json);
    if (answer.status !== 201 || !goods) {
      throw new Error(`creating the goods of phase ${phase.key}: HTTP ${answer.status} ${answer.body.slice(0, 200)}`);
    }
    sales.push({ goodsId: goods.goodsId, tally: new PhaseTally() });
  }
  return sales;
}

/** When each goods came to rest (nothing queued, outbox empty, its results final), and when the whole run was quiet. */
type Quiet = { quietAt: number | undefined; restAt: Map<number, number> };

/**
 * Waits until every goods is at rest and was reconciled by the cron after that, with no queue
 * batch for `calmS`; gives up after the plan's timeout and returns what came to rest by then.
 */
async function waitQuiet(stack: ChaosStack, admin: AdminApi, plan: ChaosPlan, sales: Sale[], poller: ResultPoller): Promise<Quiet> {
  const db = new pg.Client({ connectionString: stack.databaseUrl });
  await db.connect();
  const started = Date.now();
  const deadline = started + plan.quietTimeoutS * 1000;
  const restAt = new Map<number, number>();
  let lastSaid = 0;
  try {
    for (;;) {
      const now = Date.now();
      const stats = await Promise.all(sales.map((s) => admin.stats(s.goodsId).catch(() => undefined)));
      sales.forEach((sale, i) => {
        const st = stats[i];
        if (st && st.queued === 0 && st.outboxPending === 0 && poller.unresolvedOf(sale.tally) === 0) {
          restAt.set(sale.goodsId, restAt.get(sale.goodsId) ?? now);
        } else {
          restAt.delete(sale.goodsId);
        }
      });
      const { rows } = await db.query<{ goods_id: string; last: Date }>(
        'SELECT goods_id, max(run_at) AS last FROM reconciliation_report WHERE goods_id = ANY($1) GROUP BY goods_id',
        [sales.map((s) => s.goodsId)],
      );
      const reconciled = rows.filter((r) => (restAt.get(Number(r.goods_id)) ?? Number.POSITIVE_INFINITY) <= r.last.getTime()).length;
      const lastBatch = Math.max(stack.events.lastAt['orders.batch'] ?? 0, stack.events.lastAt['miniflare.queue_batch'] ?? 0);
      const calm = now - lastBatch > plan.calmS * 1000;
      if (reconciled === sales.length && calm) {
        say(`quiet ${seconds(started)} s after the last phase, every goods reconciled by the cron`);
        return { quietAt: Math.max(...restAt.values()), restAt };
      }
      if (now > deadline) {
        say(`not quiet within ${plan.quietTimeoutS} s (${sales.length - restAt.size} goods not at rest): judging the state as it is`);
        return { quietAt: undefined, restAt };
      }
      if (now - lastSaid > 10_000) {
        lastSaid = now;
        const since = lastBatch ? `${seconds(lastBatch)} s ago` : 'none yet';
        say(
          `  waiting: ${sales.length - restAt.size} goods not at rest, ${poller.unresolved} results not final, ${reconciled} reconciled at rest, last queue batch ${since}`,
        );
      }
      await sleep(1_000);
    }
  } finally {
    await db.end();
  }
}

/** How many object resets a phase asked for, how many every object asked took, and how many objects' resets the sale's calls met. */
function resetsOf(log: FaultLog | undefined): { asked: number; done: number; met: number } {
  const resets = (log?.events ?? []).filter((e) => e.reset !== undefined);
  return { asked: resets.length, done: resets.filter((e) => e.reset).length, met: resets.reduce((n, e) => n + (e.met ?? 0), 0) };
}

/** The Worker's warnings and errors (and the faults' own lines) between two counts of its events. */
function eventsBetween(
  before: Record<string, number>,
  after: Record<string, number>,
  samples: Record<string, string[]>,
): Record<string, number> {
  const delta: Record<string, number> = {};
  for (const [event, n] of Object.entries(after)) {
    const d = n - (before[event] ?? 0);
    if (d > 0 && (samples[event] !== undefined || event.startsWith('dev_fault.')) && !event.startsWith('miniflare.info')) {
      delta[event] = d;
    }
  }
  return delta;
}

async function run(o: ChaosOptions): Promise<number> {
  const runStarted = Date.now();
  const plan = chaosPlan(o.mode, productionQueueSchedule(), o.only, o.shards, o.mirror);
  const header = [
    `npm run chaos${o.mode === 'short' ? ' -- --short' : ''}: ${plan.phases.length} phases, ${plan.phases.reduce((n, p) => n + p.stock, 0)} units` +
      (plan.shards > 1 ? `, each goods over ${plan.shards} stock shards` : '') +
      (plan.mirror ? '' : ', without the Redis mirror'),
    ...describeSchedule(plan),
  ];
  for (const line of header) {
    say(line);
  }
  say(`Starting PostgreSQL${plan.mirror ? ', redis-server' : ''} and the Worker bundle under Miniflare...`);
  const stack = await startChaosStack(plan, { verbose: o.verbose });
  const interrupt = () => {
    say('interrupted: stopping everything this run started');
    void stack.close().finally(() => process.exit(130));
  };
  process.once('SIGINT', interrupt);
  process.once('SIGTERM', interrupt);
  // Its own client: a held result read keeps its socket for up to the page's wait.
  const resultsHttp = httpClient(stack.url, { maxSockets: 4_096, timeoutMs: 30_000 });
  const poller = new ResultPoller(resultsHttp, plan.pollMs);
  // The hostile requests' own client, as a bot is not the shoppers' browsers: a burst of 25
  // requests at once would otherwise take half the crowd's sockets and queue honest shoppers
  // behind it, a cost to the crowd that the Worker never caused.
  const hostileHttp = httpClient(stack.url, { maxSockets: 64, timeoutMs: 15_000 });
  try {
    const admin = adminApi(stack.http, stack.adminToken);
    say(
      `ready in ${seconds(runStarted)} s: ${stack.url}, PostgreSQL on port ${stack.postgres.port}, ${stack.redis ? `redis-server on port ${stack.redis.port}` : 'no Redis mirror'}`,
    );
    const sales = await createGoods(stack, plan);
    for (const [i, phase] of plan.phases.entries()) {
      const sale = sales[i] as Sale;
      const shoppers = phase.buyers + phase.latecomers + phase.again + phase.hostile;
      say(`\nphase ${phase.key}: ${phase.title} (goods ${sale.goodsId}, ${phase.stock} units, ${shoppers} shoppers, ${phase.lengthS} s)`);
      const started = Date.now();
      const eventsBefore = { ...stack.events.counts };
      const ctx = {
        http: stack.http,
        adminToken: stack.adminToken,
        goodsId: sale.goodsId,
        postgres: stack.postgres,
        redis: stack.redis,
        say,
      };
      const [, faultLog] = await Promise.all([
        runCrowd({
          ...ctx,
          minter: stack.minter,
          phase,
          tally: sale.tally,
          poller,
          hostileHttp,
          retryShare: plan.retryShare,
          maxInFlight: plan.maxInFlight,
        }),
        actFault(phase, ctx),
      ]);
      sale.faultLog = faultLog;
      await sleep(started + phase.lengthS * 1000 - Date.now());
      sale.workerEvents = eventsBetween(eventsBefore, stack.events.counts, stack.events.samples);
      const logged = Object.entries(sale.workerEvents).map(([event, n]) => `${event} x${n}`);
      say(`  the Worker logged: ${logged.join(', ') || 'no warnings'}`);
      const t = sale.tally;
      say(
        `  ${t.requests} requests in ${seconds(started)} s: ${t.accepted.size} accepted, ${t.busy} busy, ${t.fiveXX} other 5xx, ${t.hostile.sent} hostile, ${t.heldReads} result reads held a second or more`,
      );
      if (phase.queue) {
        say(`  ${describeLine(t.line)} (so far)`);
      }
    }
    say('\nwaiting until everything is quiet (queues drained, results final, the cron reconciled)...');
    const quiet = await waitQuiet(stack, admin, plan, sales, poller);
    await poller.stop();
    // One last read of every accepted purchase, so the verdict judges the final answers.
    const finals = new Map<string, ResultStatus | undefined>();
    for (const sale of sales) {
      for (const a of sale.tally.accepted.values()) {
        finals.set(a.requestId, await poller.poll(a, sale.tally));
      }
    }
    const facts = await collectFacts({
      admin,
      databaseUrl: stack.databaseUrl,
      redisUrl: stack.redis?.url,
      goods: sales.map((s) => ({ goodsId: s.goodsId, requestIds: [...s.tally.accepted.keys()] })),
    });
    const summaries = sales.map((sale) =>
      sale.tally.summary((a) => ({ status: finals.get(a.requestId) ?? 'UNKNOWN', orderId: a.orderId })),
    );
    const verdicts = plan.phases.map((phase, i) =>
      judgePhase({
        ...phase,
        demand: phase.buyers + phase.latecomers,
        tally: summaries[i] as (typeof summaries)[number],
        facts: facts[i] as (typeof facts)[number],
        restAt: quiet.restAt.get((sales[i] as Sale).goodsId),
        evidence: faultEvidence(phase.fault, (sales[i] as Sale).workerEvents ?? {}, resetsOf((sales[i] as Sale).faultLog)),
        shards: plan.shards,
        mirror: plan.mirror,
      }),
    );
    const took = `${seconds(runStarted)} s (${o.mode}), ${stack.cronRuns()} cron firings`;
    process.stdout.write(`\n${formatVerdict(verdicts, [...header, `took ${took}`, ''])}\n`);
    // Not failures (a browser sends them again too), but counted: a run where they climb is one
    // where the Worker closes connections more than it did.
    say(
      `requests sent again on a new connection after their kept-alive one was closed: ${stack.http.staleRetries + resultsHttp.staleRetries + hostileHttp.staleRetries}`,
    );
    const unanswered = sales.flatMap((s) => s.tally.noAnswerAt);
    if (o.verbose && unanswered.length > 0) {
      // Last, where a long log's tail is read: what the Worker and the runtime said about then.
      process.stdout.write(
        `\n${AROUND_UNANSWERED} (${unanswered.map(clock).join(', ')}), within ${AROUND_MS / 1000} s:\n${stack.events.linesAround(unanswered, AROUND_MS).join('\n') || '  (none)'}\nend of the lines around them\n`,
      );
    }
    if (o.json) {
      const result = {
        mode: o.mode,
        plan,
        tookS: seconds(runStarted),
        quietAt: quiet.quietAt,
        events: stack.events.counts,
        samples: stack.events.samples,
        phases: verdicts,
      };
      await writeFile(
        o.json,
        `${JSON.stringify({ ...result, faults: sales.map((s) => ({ ...s.faultLog, workerEvents: s.workerEvents })), tallies: summaries, facts }, null, 2)}\n`,
      );
    }
    return exitCode(verdicts);
  } finally {
    process.off('SIGINT', interrupt);
    process.off('SIGTERM', interrupt);
    await poller.stop();
    resultsHttp.close();
    hostileHttp.close();
    await stack.close();
  }
}

async function main(): Promise<number> {
  let o: ChaosOptions;
  try {
    o = parseChaosOptions(process.argv.slice(2));
  } catch (error) {
    say(`${error instanceof Error ? error.message : String(error)}\n\n${CHAOS_USAGE}`);
    return 2;
  }
  if (o.help) {
    process.stdout.write(`${CHAOS_USAGE}\n`);
    return 0;
  }
  return run(o);
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    say(`chaos: the run could not be made: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    process.exitCode = 2;
  },
);
