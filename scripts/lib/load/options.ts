// Command-line options of `npm run loadtest`.
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { RESULT_WAIT_SECONDS } from '../../../web/src/shopper/pacing.ts';
import { MAX_RESULT_WAIT_SECONDS } from '../../../workers/kernel/contract.ts';

export const USAGE = `Usage: npm run loadtest -- --url <deployment> [options]

Drives a running deployment through the shopper flow (challenge, token, purchase, its result
read until final) and checks the invariants through the admin stats afterwards.

  --url URL              the deployment, e.g. http://127.0.0.1:8787 or https://sale.example.com
  --stock N              create a goods with N units for this run (needs the admin token)
  --goods-id ID          or use an existing goods (on sale now)
  --users N              distinct shoppers (default 1000, or every JWT of --jwt-file)
  --concurrency N        requests in flight at once (default 100)
  --duration S           keep buying for S seconds (shoppers come back once all have tried)
  --requests N           or stop after N purchase attempts
                         (neither: every shopper tries once, plus the duplicates)
  --duplicates F         share of attempts by a shopper who already tried (0..1, default 0)
  --retries F            share of purchases sent twice with the same Idempotency-Key (default 0)
  --malformed F          share of requests that are bad input and must get a 4xx (default 0)
  --quantity N           units each purchase asks for (1-100, default 1); with --stock the goods
                         is made with perUserLimit N
  --allowlist            with --stock: the goods is open to an allowlist only; the tool loads its
                         shoppers into it and first sends outsiders (a tenth as many, at most
                         1,000), who must be refused 403 NOT_ELIGIBLE
  --jwt-file FILE        shopper JWTs, one per line (default: POST /api/dev/token, DEV_MODE only)
  --admin-token T        admin token (default $ADMIN_TOKEN; for a local URL, .dev.vars(.example))
  --raise-limits         lift the per-IP limit and the ban threshold for the run (all requests
                         come from this machine's address), and restore them afterwards
  --turnstile-token T    answer Turnstile challenges with T (Turnstile's test keys accept any)
  --lookahead N          shoppers with a fresh token waiting to buy (default: --concurrency)
  --result-wait S        each result read asks the server to hold a QUEUED answer up to S seconds
                         for the final one, as the shopper page does (0-${MAX_RESULT_WAIT_SECONDS}, default ${RESULT_WAIT_SECONDS});
                         0: plain reads, answered at once
  --poll-interval MS     the next result read starts MS after the last was sent (default 1000)
  --settle-timeout S     how long to wait for the queue to drain afterwards (default 60)
  --timeout MS           per-request timeout (default 10000; a held result read has its wait
                         and 15 s more when that is longer)
  --json                 print the report as JSON on stdout (progress stays on stderr)
  --help

Exit status: 0 when every invariant holds, 1 when one fails, 2 when the test could not run
(a usage error, the deployment unreachable, the admin token refused).`;

const root = fileURLToPath(new URL('../../..', import.meta.url));

export class UsageError extends Error {}

/** A mistake in the command line: ours, or one node:util's parseArgs found. */
export function isUsageError(error: unknown): error is Error {
  return error instanceof UsageError || (error instanceof Error && 'code' in error && String(error.code).startsWith('ERR_PARSE_ARGS'));
}

const OPTIONS = {
  url: { type: 'string' },
  stock: { type: 'string' },
  'goods-id': { type: 'string' },
  users: { type: 'string' },
  concurrency: { type: 'string' },
  duration: { type: 'string' },
  requests: { type: 'string' },
  duplicates: { type: 'string' },
  retries: { type: 'string' },
  malformed: { type: 'string' },
  quantity: { type: 'string' },
  allowlist: { type: 'boolean' },
  'jwt-file': { type: 'string' },
  'admin-token': { type: 'string' },
  'raise-limits': { type: 'boolean' },
  'turnstile-token': { type: 'string' },
  lookahead: { type: 'string' },
  'result-wait': { type: 'string' },
  'poll-interval': { type: 'string' },
  'settle-timeout': { type: 'string' },
  timeout: { type: 'string' },
  json: { type: 'boolean' },
  help: { type: 'boolean' },
} as const;

/** What `npm run loadtest` was asked to do. */
export type LoadOptions = ReturnType<typeof loadSettings>;

function number(
  value: string | undefined,
  name: string,
  { min = 0, max = Number.MAX_SAFE_INTEGER, integer = true }: { min?: number; max?: number; integer?: boolean } = {},
): number | undefined {
  if (value === undefined) {
    return undefined;
  }
  const n = Number(value);
  if (!Number.isFinite(n) || n < min || n > max || (integer && !Number.isInteger(n))) {
    throw new UsageError(`--${name} must be ${integer ? 'an integer' : 'a number'} between ${min} and ${max}, got ${value}`);
  }
  return n;
}

/** An integer option from `min` to `max` (the scripts' other commands read theirs with it too). */
export function intOption(value: string | undefined, name: string, min: number, max: number): number | undefined {
  return number(value, name, { min, max });
}

/** ADMIN_TOKEN of the local settings, for a deployment on this machine. */
function localAdminToken(): string | undefined {
  for (const file of ['.dev.vars', '.dev.vars.example']) {
    const path = `${root}/${file}`;
    if (existsSync(path)) {
      const m = readFileSync(path, 'utf8').match(/^\s*ADMIN_TOKEN\s*=\s*"?([^"\n]*)"?\s*$/m);
      if (m?.[1]) {
        return m[1];
      }
    }
  }
  return undefined;
}

/** Parses argv into the load test's settings; throws UsageError with a message for the user. */
export function parseLoadOptions(argv: string[]): { help: true } | (LoadOptions & { help?: undefined }) {
  const { values } = parseArgs({
    args: argv,
    options: OPTIONS,
    strict: true,
  });
  if (values.help) {
    return { help: true };
  }
  return loadSettings(values);
}

type Values = ReturnType<typeof parseArgs<{ options: typeof OPTIONS; strict: true }>>['values'];

function loadSettings(values: Values) {
  if (!values.url) {
    throw new UsageError('--url is required');
  }
  let url: URL;
  try {
    url = new URL(values.url);
  } catch {
    throw new UsageError(`--url: not a URL: ${values.url}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new UsageError('--url must be http:// or https://');
  }
  const stock = number(values.stock, 'stock', { max: 10_000_000 });
  const goodsId = number(values['goods-id'], 'goods-id', { min: 1 });
  if ((stock === undefined) === (goodsId === undefined)) {
    throw new UsageError('give either --stock (create a goods) or --goods-id (use an existing one)');
  }
  const durationS = number(values.duration, 'duration', { min: 1, max: 24 * 3600 });
  const requests = number(values.requests, 'requests', { min: 1 });
  if (durationS !== undefined && requests !== undefined) {
    throw new UsageError('give --duration or --requests, not both');
  }
  const local = ['127.0.0.1', 'localhost', '[::1]'].includes(url.hostname);
  const adminToken = values['admin-token'] ?? process.env.ADMIN_TOKEN ?? (local ? localAdminToken() : undefined);
  if (!adminToken) {
    throw new UsageError('the admin token is needed to read the stats: pass --admin-token or set ADMIN_TOKEN');
  }
  const allowlist = values.allowlist ?? false;
  if (allowlist && stock === undefined) {
    throw new UsageError('--allowlist makes its own goods: give --stock');
  }
  const concurrency = number(values.concurrency, 'concurrency', { min: 1, max: 10_000 }) ?? 100;
  const share = (name: 'duplicates' | 'retries' | 'malformed') => number(values[name], name, { max: 1, integer: false }) ?? 0;
  return {
    url: url.toString().replace(/\/$/, ''),
    stock,
    goodsId,
    /** undefined: 1000 dev shoppers, or every JWT of --jwt-file. */
    users: number(values.users, 'users', { min: 1, max: 10_000_000 }),
    concurrency,
    durationS,
    requests,
    duplicates: share('duplicates'),
    retries: share('retries'),
    malformed: share('malformed'),
    quantity: number(values.quantity, 'quantity', { min: 1, max: 100 }) ?? 1,
    allowlist,
    jwtFile: values['jwt-file'],
    adminToken,
    raiseLimits: values['raise-limits'] ?? false,
    turnstileToken: values['turnstile-token'],
    lookahead: number(values.lookahead, 'lookahead', { min: 1, max: 100_000 }) ?? concurrency,
    resultWaitS: number(values['result-wait'], 'result-wait', { max: MAX_RESULT_WAIT_SECONDS }) ?? RESULT_WAIT_SECONDS,
    pollIntervalMs: number(values['poll-interval'], 'poll-interval', { min: 50, max: 60_000 }) ?? 1000,
    settleTimeoutMs: (number(values['settle-timeout'], 'settle-timeout', { min: 1, max: 3600 }) ?? 60) * 1000,
    timeoutMs: number(values.timeout, 'timeout', { min: 100, max: 600_000 }) ?? 10_000,
    json: values.json ?? false,
  };
}
