// Pre-flight checks for `npm run deploy`, kept pure so they are tested without an account.
// The Worker validates the secret VALUES itself (workers/config.ts); from here only the
// secret NAMES are visible (`wrangler secret list`), plus the DATABASE_URL given to migrate.

export const ENVIRONMENTS = ['staging', 'production'] as const;
export type DeployEnvironment = (typeof ENVIRONMENTS)[number];

/** Secrets every deployed environment needs. */
export const REQUIRED_SECRETS = ['ADMIN_TOKEN', 'TOKEN_SECRET', 'PAYMENT_WEBHOOK_SECRET', 'DATABASE_URL'];

/** `--env staging|production` (also `--env=...`); production when absent. */
export function parseDeployArgs(argv: readonly string[]): { env: DeployEnvironment } {
  let env: string = 'production';
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] ?? '';
    if (arg === '--env' || arg === '-e') {
      env = argv[++i] ?? '';
    } else if (arg.startsWith('--env=')) {
      env = arg.slice('--env='.length);
    } else {
      throw new Error(`unknown argument ${arg}; usage: npm run deploy -- [--env staging|production]`);
    }
  }
  const known = ENVIRONMENTS.find((e) => e === env);
  if (!known) {
    throw new Error(`--env must be one of ${ENVIRONMENTS.join(', ')} (got "${env}")`);
  }
  return { env: known };
}

/** Parses `wrangler secret list --format json` output into names. */
export function parseSecretList(stdout: string): string[] {
  const start = stdout.indexOf('[');
  const list: unknown = start >= 0 ? JSON.parse(stdout.slice(start)) : undefined;
  const names = Array.isArray(list)
    ? list.map((s: unknown) => (typeof s === 'object' && s !== null && 'name' in s ? s.name : undefined))
    : [];
  if (!Array.isArray(list) || !names.every((name) => typeof name === 'string')) {
    throw new Error('wrangler secret list did not print a JSON list of secrets');
  }
  return names;
}

/**
 * What is missing or misplaced among a Worker environment's secret names; `varNames` are the
 * environment's [vars] in wrangler.toml (a public value such as TURNSTILE_SITE_KEY may live there).
 */
export function secretIssues(secretNames: readonly string[], varNames: readonly string[], env: string): string[] {
  const have = new Set([...secretNames, ...varNames]);
  const secrets = new Set(secretNames);
  const issues: string[] = [];
  for (const name of REQUIRED_SECRETS) {
    if (!have.has(name)) {
      issues.push(`${name} is not set`);
    }
  }
  if (!have.has('AUTH_JWT_SECRET') && !have.has('AUTH_JWKS_URL')) {
    issues.push('AUTH_JWT_SECRET (or AUTH_JWKS_URL) is not set');
  }
  const pairs: [string, string][] = [
    ['TURNSTILE_SECRET_KEY', 'TURNSTILE_SITE_KEY'],
    ['UPSTASH_REDIS_REST_URL', 'UPSTASH_REDIS_REST_TOKEN'],
  ];
  for (const [a, b] of pairs) {
    if (have.has(a) !== have.has(b)) {
      issues.push(`${have.has(a) ? b : a} is not set (${a} and ${b} go together)`);
    }
  }
  if (env === 'production' && !have.has('TURNSTILE_SECRET_KEY') && !have.has('TURNSTILE_SITE_KEY')) {
    issues.push('TURNSTILE_SECRET_KEY and TURNSTILE_SITE_KEY are not set (production requires Turnstile)');
  }
  for (const name of ['PG_WS_PROXY', 'DEV_MODE', 'ENVIRONMENT']) {
    if (secrets.has(name)) {
      issues.push(`${name} must not be a secret here (wrangler secret delete ${name} --env ${env})`);
    }
  }
  return issues;
}

/** Problems with the DATABASE_URL `npm run deploy` migrates (it should be the Worker's database). */
export function databaseUrlIssues(value: string | undefined): string[] {
  if (!value) {
    return ["DATABASE_URL is not set in this shell: export the database's direct connection string (Neon: the one without -pooler)"];
  }
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return ['DATABASE_URL is not a URL'];
  }
  if (!/^postgres(ql)?:$/.test(url.protocol)) {
    return ['DATABASE_URL must start with postgres:// or postgresql://'];
  }
  const issues: string[] = [];
  if (/^(localhost|127\.|\[::1\]$|0\.0\.0\.0$)/.test(url.hostname)) {
    issues.push(`DATABASE_URL points at ${url.hostname}, which a deployed Worker cannot reach`);
  }
  if (!['require', 'verify-ca', 'verify-full'].includes(url.searchParams.get('sslmode') ?? '')) {
    issues.push('DATABASE_URL must use TLS: add ?sslmode=require (the Worker refuses it otherwise)');
  }
  return issues;
}

/** postgres://user:***@host/db, for logs. */
export function redactUrl(value: string | undefined): string {
  try {
    const url = new URL(value ?? '');
    if (url.password) {
      url.password = '***';
    }
    return url.toString();
  } catch {
    return '(unparseable URL)';
  }
}
