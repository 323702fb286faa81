// Configuration is parsed once per isolate at the entry (HTTP, queue, cron, Durable Object).
// Workers have no start hook, so a bad deploy "refuses to start" by failing every invocation
// with a ConfigError that names the variable; nothing reads env deeper in the code.
import { z } from 'zod';
import { DEV_FEATURES } from './build-flags';
import { type RetrySchedule, RetryScheduleEnv, retrySchedule } from './retry-schedule';

export const ENVIRONMENTS = ['development', 'staging', 'production'] as const;
export type Environment = (typeof ENVIRONMENTS)[number];

/** Deployed secrets are at least this long: `openssl rand -hex 32` gives 64 characters. */
export const MIN_SECRET_LENGTH = 32;

// The committed .dev.vars.example values: fine on a laptop, refused anywhere deployed.
const DEV_DEFAULTS = new Set([
  'dev-jwt-secret-change-me-0123456789abcdef',
  'dev-admin-token',
  'dev-token-secret-change-me-0123456789abcdef',
  'dev-payment-webhook-secret-0123456789',
]);

// Cloudflare's published Turnstile test secrets (always pass / always fail / already spent).
const TURNSTILE_TEST_SECRET = /^[123]x0{30,}AA$/;

const SECRETS = ['AUTH_JWT_SECRET', 'ADMIN_TOKEN', 'TOKEN_SECRET', 'PAYMENT_WEBHOOK_SECRET'] as const;

const text = z
  .string()
  .optional()
  .transform((v) => (v ? v : undefined));
/** Shopper tokens may live at most this long unless AUTH_JWT_MAX_LIFETIME_SECONDS says otherwise. */
export const DEFAULT_JWT_MAX_LIFETIME_SECONDS = 24 * 3600;
const MAX_JWT_LIFETIME_SECONDS = 30 * 24 * 3600;

/** A whole number of seconds in [1, max]; unset or empty means `fallback`. */
function seconds(fallback: number, max: number) {
  return z
    .string()
    .optional()
    .transform((v, ctx) => {
      if (!v) {
        return fallback;
      }
      if (!/^[1-9][0-9]{0,9}$/.test(v) || Number(v) > max) {
        ctx.addIssue({ code: 'custom', message: `must be a whole number of seconds from 1 to ${max}` });
        return z.NEVER;
      }
      return Number(v);
    });
}

const flag = z
  .enum(['true', 'false', '1', '0', ''], { error: 'must be "true" or "false"' })
  .optional()
  .transform((v) => v === 'true' || v === '1');

const EnvSchema = z.object({
  // Unset means production: a forgotten var must make the rules stricter, never looser.
  ENVIRONMENT: z
    .enum(ENVIRONMENTS, { error: `must be one of ${ENVIRONMENTS.join(', ')}` })
    .optional()
    .transform((v) => v ?? 'production'),
  AUTH_JWT_SECRET: text,
  AUTH_JWKS_URL: text,
  AUTH_JWT_ISSUER: text,
  AUTH_JWT_AUDIENCE: text,
  AUTH_JWT_MAX_LIFETIME_SECONDS: seconds(DEFAULT_JWT_MAX_LIFETIME_SECONDS, MAX_JWT_LIFETIME_SECONDS),
  ADMIN_TOKEN: text,
  TOKEN_SECRET: text,
  PAYMENT_WEBHOOK_SECRET: text,
  DATABASE_URL: text,
  PG_WS_PROXY: text,
  TURNSTILE_SECRET_KEY: text,
  TURNSTILE_SITE_KEY: text,
  UPSTASH_REDIS_REST_URL: text,
  UPSTASH_REDIS_REST_TOKEN: text,
  DEV_MODE: flag,
  ENABLE_SANDBOX_PAYMENTS: flag,
  ...RetryScheduleEnv,
});
type ParsedEnv = z.infer<typeof EnvSchema>;

/** How shopper JWTs are verified: the shop's HS256 secret, its JWKS (RS256/ES256), or both. */
export type ShopperAuthConfig = {
  hs256Secret: string | undefined;
  jwksUrl: string | undefined;
  /** Required `iss` / `aud` claims, when set. */
  issuer: string | undefined;
  audience: string | undefined;
  /** Every token must carry `exp`, at most this many seconds after its `iat` (or now). */
  maxLifetimeSeconds: number;
};

export type Config = {
  environment: Environment;
  /** HS256 key for shopper JWTs; reading it without AUTH_JWT_SECRET set throws a ConfigError. */
  readonly jwtSecret: string;
  shopperAuth: ShopperAuthConfig;
  adminToken: string;
  tokenSecret: string;
  paymentWebhookSecret: string;
  databaseUrl: string;
  pgWsProxy: string | undefined;
  turnstile: { secretKey: string; siteKey: string } | undefined;
  redis: { url: string; token: string } | undefined;
  devMode: boolean;
  /** The sandbox payment provider may take payments: locally (DEV_MODE), or in staging when explicitly enabled. */
  sandboxPayments: boolean;
  /** How long the queue consumers and the goods' outbox wait before trying again. */
  retry: RetrySchedule;
};

/** A configuration problem, naming the variable, raised before any handler runs. */
export class ConfigError extends Error {
  constructor(readonly issues: string[]) {
    super(`invalid configuration: ${issues.join('; ')}`);
    this.name = 'ConfigError';
  }
}

/** Looks like a placeholder rather than a generated secret. */
function weakness(value: string): string | undefined {
  if (DEV_DEFAULTS.has(value) || value.startsWith('dev-')) {
    return 'is the local default from .dev.vars.example';
  }
  if (/change-?me|example|placeholder/i.test(value)) {
    return 'looks like a placeholder';
  }
  if (new Set(value).size < 10) {
    return 'has too few distinct characters to be a generated secret';
  }
  return undefined;
}

function isLocalHost(hostname: string): boolean {
  const h = hostname.replace(/^\[|\]$/g, '').toLowerCase();
  return h === 'localhost' || h.endsWith('.localhost') || h === '::1' || h === '0.0.0.0' || h.startsWith('127.');
}

function parseUrl(value: string): URL | undefined {
  try {
    return new URL(value);
  } catch {
    return undefined;
  }
}

type Issue = (name: string, message: string) => void;

function checkDatabaseUrl(value: string | undefined, deployed: boolean, issue: Issue): void {
  const url = value ? parseUrl(value) : undefined;
  if (!value) {
    issue('DATABASE_URL', 'is required (postgres://user:password@host/db?sslmode=require)');
    return;
  }
  if (!url || !/^postgres(ql)?:$/.test(url.protocol) || !url.hostname) {
    issue('DATABASE_URL', 'must be a postgres:// URL with a host');
    return;
  }
  if (!deployed) {
    return;
  }
  if (isLocalHost(url.hostname)) {
    issue('DATABASE_URL', `points at ${url.hostname}, which a deployed Worker cannot reach`);
  }
  if (!['require', 'verify-ca', 'verify-full'].includes(url.searchParams.get('sslmode') ?? '')) {
    issue('DATABASE_URL', 'must use TLS: add ?sslmode=require');
  }
}

function checkHttpsUrl(name: string, value: string | undefined, deployed: boolean, issue: Issue): void {
  if (!value) {
    return;
  }
  const url = parseUrl(value);
  if (!url || (url.protocol !== 'https:' && url.protocol !== 'http:')) {
    issue(name, 'must be an https:// URL');
  } else if (deployed && (url.protocol !== 'https:' || isLocalHost(url.hostname))) {
    issue(name, 'must be a public https:// URL');
  }
}

function checkSecrets(e: ParsedEnv, deployed: boolean, issue: Issue): void {
  for (const name of SECRETS) {
    const minimum = deployed ? MIN_SECRET_LENGTH : name === 'ADMIN_TOKEN' ? 8 : 16;
    const value = e[name];
    if (value === undefined) {
      // The JWT secret may be replaced by a JWKS URL; checked with the auth settings.
      if (name !== 'AUTH_JWT_SECRET') {
        issue(name, 'is required');
      }
      continue;
    }
    if (value.length < minimum) {
      issue(name, `must be at least ${minimum} characters${deployed ? ` in ${e.ENVIRONMENT} (openssl rand -hex 32)` : ''}`);
    } else if (deployed) {
      const weak = weakness(value);
      if (weak) {
        issue(name, `${weak}; generate one with openssl rand -hex 32`);
      }
    }
  }
}

function checkAuth(e: ParsedEnv, deployed: boolean, issue: Issue): void {
  if (!e.AUTH_JWT_SECRET && !e.AUTH_JWKS_URL) {
    issue('AUTH_JWT_SECRET', "is required, or set AUTH_JWKS_URL to verify the shop's RS256/ES256 tokens");
  }
  checkHttpsUrl('AUTH_JWKS_URL', e.AUTH_JWKS_URL, deployed, issue);
}

function checkOptionalServices(e: ParsedEnv, deployed: boolean, issue: Issue): void {
  const pairs = [
    ['TURNSTILE_SECRET_KEY', 'TURNSTILE_SITE_KEY'],
    ['UPSTASH_REDIS_REST_URL', 'UPSTASH_REDIS_REST_TOKEN'],
  ] as const;
  for (const [a, b] of pairs) {
    if (e[a] && !e[b]) {
      issue(b, `is required when ${a} is set`);
    } else if (e[b] && !e[a]) {
      issue(a, `is required when ${b} is set`);
    }
  }
  checkHttpsUrl('UPSTASH_REDIS_REST_URL', e.UPSTASH_REDIS_REST_URL, deployed, issue);
  if (e.ENVIRONMENT === 'production') {
    // The built-in arithmetic challenge keeps local runs self-contained; bots solve it.
    if (!e.TURNSTILE_SECRET_KEY) {
      issue('TURNSTILE_SECRET_KEY', 'is required in production (the built-in challenge is for local runs)');
    } else if (TURNSTILE_TEST_SECRET.test(e.TURNSTILE_SECRET_KEY)) {
      issue('TURNSTILE_SECRET_KEY', "is one of Cloudflare's public test keys");
    }
  }
}

function checkDeployment(e: ParsedEnv, devFeatures: boolean, issue: Issue): void {
  if (e.DEV_MODE) {
    issue('DEV_MODE', `must be false in ${e.ENVIRONMENT} (it issues shopper tokens to anyone)`);
  }
  if (e.PG_WS_PROXY) {
    issue('PG_WS_PROXY', `must be empty in ${e.ENVIRONMENT} (it is the local WebSocket bridge; Neon needs none)`);
  }
  if (e.ENVIRONMENT === 'production' && devFeatures) {
    issue('__DEV_FEATURES__', 'this bundle was built with dev features; deploy with --env production');
  }
  if (e.ENABLE_SANDBOX_PAYMENTS && e.ENVIRONMENT === 'production') {
    issue('ENABLE_SANDBOX_PAYMENTS', 'must be false in production (the sandbox takes no money)');
  } else if (e.ENABLE_SANDBOX_PAYMENTS && !devFeatures) {
    issue('ENABLE_SANDBOX_PAYMENTS', 'this bundle has no sandbox provider: also set define __DEV_FEATURES__ = "true" in [env.staging]');
  }
}

/** Validates `env` without caching; `devFeatures` is the bundle's build flag (a parameter for tests). */
export function parseConfig(env: object, build: { devFeatures: boolean } = { devFeatures: DEV_FEATURES }): Config {
  const parsed = EnvSchema.safeParse(env);
  if (!parsed.success) {
    throw new ConfigError(parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`));
  }
  const e = parsed.data;
  const deployed = e.ENVIRONMENT !== 'development';
  const issues: string[] = [];
  const issue: Issue = (name, message) => issues.push(`${name}: ${message}`);
  checkSecrets(e, deployed, issue);
  checkAuth(e, deployed, issue);
  checkDatabaseUrl(e.DATABASE_URL, deployed, issue);
  checkOptionalServices(e, deployed, issue);
  if (deployed) {
    checkDeployment(e, build.devFeatures, issue);
  }
  const retry = retrySchedule(e, issue);
  if (issues.length > 0) {
    throw new ConfigError(issues);
  }
  return toConfig(e, retry);
}

function toConfig(e: ParsedEnv, retry: RetrySchedule): Config {
  const required = (name: string, value: string | undefined): string => {
    if (value === undefined) {
      throw new ConfigError([`${name}: is required`]);
    }
    return value;
  };
  const hs256Secret = e.AUTH_JWT_SECRET;
  return {
    environment: e.ENVIRONMENT,
    get jwtSecret() {
      // Only the dev token route signs tokens; a JWKS-only shop has no key to sign with.
      return required('AUTH_JWT_SECRET', hs256Secret);
    },
    shopperAuth: {
      hs256Secret,
      jwksUrl: e.AUTH_JWKS_URL,
      issuer: e.AUTH_JWT_ISSUER,
      audience: e.AUTH_JWT_AUDIENCE,
      maxLifetimeSeconds: e.AUTH_JWT_MAX_LIFETIME_SECONDS,
    },
    adminToken: required('ADMIN_TOKEN', e.ADMIN_TOKEN),
    tokenSecret: required('TOKEN_SECRET', e.TOKEN_SECRET),
    paymentWebhookSecret: required('PAYMENT_WEBHOOK_SECRET', e.PAYMENT_WEBHOOK_SECRET),
    databaseUrl: required('DATABASE_URL', e.DATABASE_URL),
    pgWsProxy: e.PG_WS_PROXY,
    turnstile:
      e.TURNSTILE_SECRET_KEY && e.TURNSTILE_SITE_KEY ? { secretKey: e.TURNSTILE_SECRET_KEY, siteKey: e.TURNSTILE_SITE_KEY } : undefined,
    redis:
      e.UPSTASH_REDIS_REST_URL && e.UPSTASH_REDIS_REST_TOKEN
        ? { url: e.UPSTASH_REDIS_REST_URL, token: e.UPSTASH_REDIS_REST_TOKEN }
        : undefined,
    devMode: e.DEV_MODE,
    sandboxPayments: e.DEV_MODE || e.ENABLE_SANDBOX_PAYMENTS,
    retry,
  };
}

const cache = new WeakMap<object, Config>();

/** Parses `env` once per isolate (the object is stable across requests); throws ConfigError naming each bad variable. */
export function getConfig(env: Env): Config {
  const cached = cache.get(env);
  if (cached) {
    return cached;
  }
  const config = parseConfig(env);
  cache.set(env, config);
  return config;
}
