#!/usr/bin/env tsx
// `npm run deploy -- [--env staging|production]` (production when omitted):
//   1. pre-flight: DATABASE_URL in this shell looks deployable, and the Worker environment has
//      every required secret (`wrangler secret list`: names only, the values cannot be read
//      back; the Worker itself refuses weak or dev values on its first request);
//   2. `npm run db:migrate` against DATABASE_URL;
//   3. `wrangler deploy --env <env>`.
// Stops at the first failure with a non-zero exit code; nothing later runs.
// WRANGLER=/path/to/wrangler overrides the project's pinned wrangler (tests use a stand-in).
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import {
  type DeployEnvironment,
  databaseUrlIssues,
  parseDeployArgs,
  parseSecretList,
  redactUrl,
  secretIssues,
} from './lib/deploy-checks.ts';
import { tsNode } from './lib/run-ts.ts';

const root = fileURLToPath(new URL('..', import.meta.url));

function step(message: string): void {
  console.log(`\n[deploy] ${message}`);
}

function fail(message: string, code = 1): never {
  console.error(`[deploy] ${message}`);
  process.exit(code);
}

/** Runs wrangler with inherited stdio, or captured when `capture` (for JSON output). */
function wrangler(args: string[], { capture = false }: { capture?: boolean } = {}) {
  const [command, prefix]: [string, string[]] = process.env.WRANGLER
    ? [process.env.WRANGLER, []]
    : [process.execPath, [`${root}node_modules/wrangler/bin/wrangler.js`]];
  return spawnSync(command, [...prefix, ...args], {
    cwd: root,
    stdio: capture ? ['inherit', 'pipe', 'inherit'] : 'inherit',
    encoding: 'utf8',
  });
}

let env: DeployEnvironment;
try {
  ({ env } = parseDeployArgs(process.argv.slice(2)));
} catch (error) {
  fail(error instanceof Error ? error.message : String(error), 2);
}

step(`pre-flight for ${env}`);
const urlIssues = databaseUrlIssues(process.env.DATABASE_URL);
if (urlIssues.length > 0) {
  fail(urlIssues.join('\n[deploy] '));
}
// Loaded late: importing wrangler takes seconds, and the checks above need none of it.
const { unstable_readConfig } = await import('wrangler');
const config = unstable_readConfig({ config: `${root}wrangler.toml`, env });
const listed = wrangler(['secret', 'list', '--env', env, '--format', 'json'], { capture: true });
if (listed.status !== 0) {
  fail(
    `could not list the secrets of ${config.name} (exit ${listed.status}). Logged in (npx wrangler login)? ` +
      `First deploy: put the secrets first, which creates the Worker (docs/deploying.md).`,
  );
}
let secretNames: string[] = [];
try {
  secretNames = parseSecretList(listed.stdout);
} catch (error) {
  fail(error instanceof Error ? error.message : String(error));
}
const missing = secretIssues(secretNames, Object.keys(config.vars ?? {}), env);
if (missing.length > 0) {
  fail(`${config.name} is not ready:\n  - ${missing.join('\n  - ')}\nSet each with: npx wrangler secret put NAME --env ${env}`);
}
console.log(`[deploy] ${secretNames.length} secrets present on ${config.name} (values are checked by the Worker at runtime)`);

step(`migrating ${redactUrl(process.env.DATABASE_URL)}`);
const migrated = spawnSync(...tsNode(`${root}scripts/migrate.ts`), { cwd: root, stdio: 'inherit' });
if (migrated.status !== 0) {
  fail('migrations failed; nothing was deployed');
}

step(`wrangler deploy --env ${env}`);
const deployed = wrangler(['deploy', '--env', env], { capture: true });
process.stdout.write(deployed.stdout ?? '');
if (deployed.status !== 0) {
  fail(`wrangler deploy failed (exit ${deployed.status}); the database is migrated, the previous Worker version still serves`);
}

// The Worker validates its secrets' values on every isolate's first request; ask it now
// rather than at the start of a sale. Custom-domain-only setups print no URL: check by hand.
const url = deployed.stdout?.match(/https:\/\/[\w.-]+\.workers\.dev/)?.[0];
if (!url) {
  step(`deployed. Check it with: curl https://<your-host>/api/health`);
} else {
  step(`checking ${url}/api/health`);
  const health = await fetch(`${url}/api/health`, { signal: AbortSignal.timeout(15_000) }).catch((error: unknown) =>
    error instanceof Error ? error : new Error(String(error)),
  );
  if (health instanceof Error) {
    console.warn(`[deploy] could not reach ${url} yet (${health.message}); a new workers.dev name can take a minute`);
  } else if (!health.ok) {
    fail(
      `${url}/api/health answered ${health.status}: the Worker rejects its configuration. ` +
        `See why with: npx wrangler tail --env ${env} (look for config.invalid), fix the secret, ` +
        `or go back with: npx wrangler rollback --env ${env}`,
    );
  } else {
    step(`done: ${config.name} is live at ${url}`);
  }
}
