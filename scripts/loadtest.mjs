#!/usr/bin/env node
// `npm run loadtest -- --url <deployment> --stock 100 --users 2000 ...`: a full-link stress test
// of a running deployment (local or remote) through the real shopper flow, then a verdict on
// the invariants read back through the admin API. See USAGE in lib/load/options.mjs.
import { adminApi, LOAD_TEST_LIMITS } from './lib/load/admin.mjs';
import { runShopperLoad } from './lib/load/flow.mjs';
import { httpClient } from './lib/load/http-client.mjs';
import { fmt } from './lib/load/metrics.mjs';
import { parseLoadOptions, USAGE, UsageError } from './lib/load/options.mjs';
import { formatLoadReport, loadReport, progressLine } from './lib/load/report.mjs';
import { devShoppers, readJwtFile } from './lib/load/shoppers.mjs';
import { loadVerdict, verifyOrders } from './lib/load/verdict.mjs';

const say = (line) => process.stderr.write(`${line}\n`);

async function main() {
  let options;
  try {
    options = parseLoadOptions(process.argv.slice(2));
  } catch (error) {
    if (error instanceof UsageError || error?.code?.startsWith?.('ERR_PARSE_ARGS')) {
      say(`${error.message}\n\n${USAGE}`);
      return 2;
    }
    throw error;
  }
  if (options.help) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  // Pollers and order checks run beside the shoppers; give them sockets of their own.
  const http = httpClient(options.url, {
    maxSockets: options.concurrency + Math.ceil(options.concurrency / 10) + 1,
    timeoutMs: options.timeoutMs,
  });
  const admin = adminApi(http, options.adminToken);
  let restoreLimits;
  const restore = async () => {
    if (restoreLimits) {
      const previous = restoreLimits;
      restoreLimits = undefined;
      await admin.setLimits(previous).then(
        () => say('Limits restored.'),
        (error) =>
          say(`Could not restore the limits (${error.message}); set them back with PUT /admin/limits: ${JSON.stringify(previous)}`),
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
    return await run(options, http, admin, (limits) => {
      restoreLimits = limits;
    });
  } finally {
    await restore();
    http.close();
  }
}

async function run(options, http, admin, rememberLimits) {
  let goods;
  if (options.stock !== undefined) {
    const created = await admin.createGoods({ stock: options.stock, title: `Load test ${new Date().toISOString()}` });
    goods = { goodsId: created.goodsId, created: true, stock: options.stock };
    say(`Created goods ${goods.goodsId} with ${fmt(options.stock)} units.`);
  } else {
    const stats = await admin.stats(options.goodsId);
    goods = { goodsId: options.goodsId, created: false, stock: stats.totalStock };
  }

  let shoppers;
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

  if (options.raiseLimits) {
    rememberLimits(await admin.getLimits());
    await admin.setLimits(LOAD_TEST_LIMITS);
    say(`Limits raised for the run: ${JSON.stringify(LOAD_TEST_LIMITS)}`);
  }

  say(`Preparing the first wave (${fmt(Math.min(options.lookahead, shoppers.length))} shoppers answer their challenge), then buying...`);
  let previous;
  const load = await runShopperLoad({
    http,
    goodsId: goods.goodsId,
    shoppers,
    concurrency: options.concurrency,
    durationS: options.durationS,
    requests: options.requests,
    duplicates: options.duplicates,
    retries: options.retries,
    malformed: options.malformed,
    lookahead: options.lookahead,
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
  const orders = await verifyOrders(http, goods.goodsId, load.accepted, load.acceptedJwts, options.concurrency);
  const verdict = loadVerdict({ stats, atRest, load, orders, createdGoods: goods.created });
  const report = loadReport({ options, goods, shoppers: shoppers.length, load, stats, verdict, staleRetries: http.staleRetries });
  process.stdout.write(options.json ? `${JSON.stringify(report, null, 2)}\n` : `\n${formatLoadReport(report)}\n`);
  return verdict.ok ? 0 : 1;
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (error) => {
    say(`loadtest: ${error.message}`);
    process.exitCode = 2;
  },
);
