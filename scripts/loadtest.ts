#!/usr/bin/env tsx
// `npm run loadtest -- --url <deployment> --stock 100 --users 2000 ...`: a full-link stress test
// of a running deployment (local or remote) through the real shopper flow, then a verdict on
// the invariants read back through the admin API. See USAGE in lib/load/options.ts.
import { type AdminApi, adminApi, LOAD_TEST_LIMITS } from './lib/load/admin.ts';
import type { Limits } from './lib/load/contract.ts';
import { type Progress, resultReadTimeoutMs, runShopperLoad } from './lib/load/flow.ts';
import { type HttpClient, httpClient } from './lib/load/http-client.ts';
import { fmt, type StepSummary } from './lib/load/metrics.ts';
import { isUsageError, type LoadOptions, parseLoadOptions, USAGE } from './lib/load/options.ts';
import { runOutsiders } from './lib/load/outsiders.ts';
import { formatLoadReport, loadReport, progressLine, type RunGoods } from './lib/load/report.ts';
import { devShoppers, readJwtFile, type Shopper } from './lib/load/shoppers.ts';
import { loadVerdict, verifyOrders } from './lib/load/verdict.ts';

const say = (line: string) => process.stderr.write(`${line}\n`);
/** At most this many outsiders (a tenth of the shoppers otherwise). */
const MAX_OUTSIDERS = 1000;

async function main(): Promise<number> {
  let options: ReturnType<typeof parseLoadOptions>;
  try {
    options = parseLoadOptions(process.argv.slice(2));
  } catch (error) {
    if (isUsageError(error)) {
      say(`${error.message}\n\n${USAGE}`);
      return 2;
    }
    throw error;
  }
  if (options.help) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  // A socket per virtual shopper; the admin API and the order checks come before and after the crowd.
  const http = httpClient(options.url, { maxSockets: options.concurrency, timeoutMs: options.timeoutMs });
  // The accepted purchases' result reads, each held up to --result-wait: a client of their own,
  // so held reads never keep a purchase waiting for a socket. As many sockets as virtual
  // shoppers; when more purchases than that await their answer (a consumer far behind), the
  // other reads wait for a socket until held ones answer.
  const resultHttp = httpClient(options.url, {
    maxSockets: options.concurrency,
    timeoutMs: resultReadTimeoutMs(options.resultWaitS, options.timeoutMs),
  });
  const admin = adminApi(http, options.adminToken);
  let restoreLimits: Limits | undefined;
  const restore = async () => {
    if (restoreLimits) {
      const previous = restoreLimits;
      restoreLimits = undefined;
      await admin.setLimits(previous).then(
        () => say('Limits restored.'),
        (error: unknown) =>
          say(
            `Could not restore the limits (${error instanceof Error ? error.message : String(error)}); set them back with PUT /admin/limits: ${JSON.stringify(previous)}`,
          ),
      );
    }
  };
  const onSignal = () => {
    say('Interrupted.');
    void restore().finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    return await run(options, { http, resultHttp }, admin, (limits) => {
      restoreLimits = limits;
    });
  } finally {
    await restore();
    http.close();
    resultHttp.close();
  }
}

async function run(
  options: LoadOptions,
  { http, resultHttp }: { http: HttpClient; resultHttp: HttpClient },
  admin: AdminApi,
  rememberLimits: (limits: Limits) => void,
): Promise<number> {
  let goods: RunGoods;
  if (options.stock !== undefined) {
    const created = await admin.createGoods({
      stock: options.stock,
      title: `Load test ${new Date().toISOString()}`,
      ...(options.quantity !== 1 ? { perUserLimit: options.quantity } : {}),
      ...(options.allowlist ? { eligibility: 'allowlist' as const } : {}),
    });
    goods = { goodsId: created.goodsId, created: true, stock: options.stock };
    say(
      `Created goods ${goods.goodsId} with ${fmt(options.stock)} units${options.quantity !== 1 ? `, up to ${options.quantity} per shopper` : ''}.`,
    );
  } else if (options.goodsId !== undefined) {
    const stats = await admin.stats(options.goodsId);
    goods = { goodsId: options.goodsId, created: false, stock: stats.totalStock };
  } else {
    throw new Error('no goods to buy: give --stock or --goods-id');
  }

  let shoppers: Shopper[];
  if (options.jwtFile) {
    shoppers = await readJwtFile(options.jwtFile);
    if (options.users !== undefined) {
      if (shoppers.length < options.users) {
        throw new Error(`${options.jwtFile} holds ${shoppers.length} shoppers, --users asks for ${options.users}`);
      }
      shoppers = shoppers.slice(0, options.users);
    }
  } else {
    const count = options.users ?? 1000;
    const prefix = `lt${Date.now().toString(36)}`;
    say(`Signing in ${fmt(count)} shoppers (POST /api/dev/token)...`);
    shoppers = await devShoppers(http, { count, prefix, concurrency: options.concurrency });
  }

  let outsiders: Shopper[] = [];
  if (options.allowlist) {
    const started = Date.now();
    const count = await admin.addToAllowlist(
      goods.goodsId,
      shoppers.map((s) => s.userId),
    );
    say(`Allowlist: ${fmt(count)} shoppers loaded in ${fmt(Date.now() - started)} ms.`);
    outsiders = await devShoppers(http, {
      count: Math.min(MAX_OUTSIDERS, Math.max(1, Math.ceil(shoppers.length / 10))),
      prefix: `out${Date.now().toString(36)}`,
      concurrency: options.concurrency,
    });
  }

  if (options.raiseLimits) {
    rememberLimits(await admin.getLimits());
    await admin.setLimits(LOAD_TEST_LIMITS);
    say(`Limits raised for the run: ${JSON.stringify(LOAD_TEST_LIMITS)}`);
  }

  // Before the buyers, while there is stock: a sold-out sale answers everyone SOLD_OUT first.
  let outsiderTokens: StepSummary | undefined;
  if (outsiders.length > 0) {
    say(`Sending ${fmt(outsiders.length)} shoppers off the allowlist for a token...`);
    outsiderTokens = await runOutsiders(http, goods.goodsId, outsiders, options);
  }

  say(`Preparing the first wave (${fmt(Math.min(options.lookahead, shoppers.length))} shoppers answer their challenge), then buying...`);
  let previous: Progress | undefined;
  const load = await runShopperLoad({
    http,
    resultHttp,
    goodsId: goods.goodsId,
    shoppers,
    concurrency: options.concurrency,
    durationS: options.durationS,
    requests: options.requests,
    duplicates: options.duplicates,
    retries: options.retries,
    malformed: options.malformed,
    quantity: options.quantity,
    lookahead: options.lookahead,
    resultWaitS: options.resultWaitS,
    pollIntervalMs: options.pollIntervalMs,
    settleTimeoutMs: options.settleTimeoutMs,
    turnstileToken: options.turnstileToken,
    onTick: (p) => {
      say(progressLine(p, previous));
      previous = p;
    },
  });
  say(`Load done in ${fmt(load.loadMs / 1000, 1)} s; waiting for the orders to settle...`);
  const { stats, atRest } = await admin.waitAtRest(goods.goodsId, { timeoutMs: options.settleTimeoutMs });
  if (!stats) {
    throw new Error(`the stats of goods ${goods.goodsId} could not be read`);
  }
  const orders = await verifyOrders(http, goods.goodsId, load.accepted, load.acceptedJwts, options.concurrency);
  const verdict = loadVerdict({ stats, atRest, load, orders, createdGoods: goods.created, quantity: options.quantity, outsiderTokens });
  const report = loadReport({
    options,
    goods,
    shoppers: shoppers.length,
    load,
    stats,
    verdict,
    staleRetries: http.staleRetries + resultHttp.staleRetries,
  });
  process.stdout.write(options.json ? `${JSON.stringify(report, null, 2)}\n` : `\n${formatLoadReport(report)}\n`);
  return verdict.ok ? 0 : 1;
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    say(`loadtest: ${error instanceof Error ? error.message : String(error)}`);
    process.exitCode = 2;
  },
);
