// The pre-flight of `npm run deploy`: arguments, the secret names a Worker environment needs,
// and the DATABASE_URL it migrates.
import { describe, expect, it } from 'vitest';
import { databaseUrlIssues, parseDeployArgs, parseSecretList, redactUrl, secretIssues } from '../../scripts/lib/deploy-checks.ts';

const ALL = [
  'AUTH_JWT_SECRET',
  'ADMIN_TOKEN',
  'TOKEN_SECRET',
  'PAYMENT_WEBHOOK_SECRET',
  'DATABASE_URL',
  'TURNSTILE_SECRET_KEY',
  'TURNSTILE_SITE_KEY',
];
const VARS = ['ENVIRONMENT', 'DEV_MODE'];
const NEON = 'postgres://app:pw@ep-quiet-sun-123456.eu-central-1.aws.neon.tech/neondb?sslmode=require';

describe('parseDeployArgs', () => {
  it('defaults to production and accepts both spellings of --env', () => {
    expect(parseDeployArgs([])).toEqual({ env: 'production' });
    expect(parseDeployArgs(['--env', 'staging'])).toEqual({ env: 'staging' });
    expect(parseDeployArgs(['--env=staging'])).toEqual({ env: 'staging' });
    expect(parseDeployArgs(['-e', 'production'])).toEqual({ env: 'production' });
  });

  it('refuses other environments and unknown arguments', () => {
    expect(() => parseDeployArgs(['--env', 'dev'])).toThrow('--env must be one of staging, production (got "dev")');
    expect(() => parseDeployArgs(['--env'])).toThrow(/--env must be one of/);
    expect(() => parseDeployArgs(['--force'])).toThrow(/unknown argument --force/);
  });
});

describe('parseSecretList', () => {
  it('reads the names from wrangler JSON, ignoring a banner before it', () => {
    const out =
      ' ⛅️ wrangler 4.86.0\n[\n  {"name": "ADMIN_TOKEN", "type": "secret_text"},\n  {"name": "DATABASE_URL", "type": "secret_text"}\n]\n';
    expect(parseSecretList(out)).toEqual(['ADMIN_TOKEN', 'DATABASE_URL']);
    expect(parseSecretList('[]')).toEqual([]);
  });

  it('refuses output that is not a list of secrets', () => {
    expect(() => parseSecretList('You are not logged in.')).toThrow(/did not print a JSON list/);
    expect(() => parseSecretList('[{"nom": "x"}]')).toThrow(/did not print a JSON list/);
  });
});

describe('secretIssues', () => {
  it('passes a complete production Worker', () => {
    expect(secretIssues(ALL, VARS, 'production')).toEqual([]);
  });

  it.each(['ADMIN_TOKEN', 'TOKEN_SECRET', 'PAYMENT_WEBHOOK_SECRET', 'DATABASE_URL'])('names a missing %s', (name) => {
    expect(
      secretIssues(
        ALL.filter((n) => n !== name),
        VARS,
        'production',
      ),
    ).toEqual([`${name} is not set`]);
  });

  it('takes AUTH_JWKS_URL instead of AUTH_JWT_SECRET, and needs one of them', () => {
    const noJwt = ALL.filter((n) => n !== 'AUTH_JWT_SECRET');
    expect(secretIssues(noJwt, VARS, 'production')).toEqual(['AUTH_JWT_SECRET (or AUTH_JWKS_URL) is not set']);
    expect(secretIssues([...noJwt, 'AUTH_JWKS_URL'], VARS, 'production')).toEqual([]);
  });

  it('requires Turnstile in production only, and both of its keys or neither', () => {
    const noTurnstile = ALL.filter((n) => !n.startsWith('TURNSTILE'));
    expect(secretIssues(noTurnstile, VARS, 'production')).toEqual([
      'TURNSTILE_SECRET_KEY and TURNSTILE_SITE_KEY are not set (production requires Turnstile)',
    ]);
    expect(secretIssues(noTurnstile, VARS, 'staging')).toEqual([]);
    expect(secretIssues([...noTurnstile, 'TURNSTILE_SECRET_KEY'], VARS, 'staging')).toEqual([
      'TURNSTILE_SITE_KEY is not set (TURNSTILE_SECRET_KEY and TURNSTILE_SITE_KEY go together)',
    ]);
    // The site key is public: it may be a [vars] entry instead of a secret.
    expect(secretIssues([...noTurnstile, 'TURNSTILE_SECRET_KEY'], [...VARS, 'TURNSTILE_SITE_KEY'], 'production')).toEqual([]);
  });

  it('needs both Upstash settings or neither', () => {
    expect(secretIssues([...ALL, 'UPSTASH_REDIS_REST_URL'], VARS, 'production')).toEqual([
      'UPSTASH_REDIS_REST_TOKEN is not set (UPSTASH_REDIS_REST_URL and UPSTASH_REDIS_REST_TOKEN go together)',
    ]);
    expect(secretIssues([...ALL, 'UPSTASH_REDIS_REST_URL', 'UPSTASH_REDIS_REST_TOKEN'], VARS, 'production')).toEqual([]);
  });

  it('flags local-only settings stored as secrets', () => {
    expect(secretIssues([...ALL, 'PG_WS_PROXY', 'DEV_MODE'], VARS, 'staging')).toEqual([
      'PG_WS_PROXY must not be a secret here (wrangler secret delete PG_WS_PROXY --env staging)',
      'DEV_MODE must not be a secret here (wrangler secret delete DEV_MODE --env staging)',
    ]);
  });
});

describe('databaseUrlIssues', () => {
  it('accepts a Neon URL with TLS', () => {
    expect(databaseUrlIssues(NEON)).toEqual([]);
    expect(databaseUrlIssues(NEON.replace('postgres:', 'postgresql:'))).toEqual([]);
  });

  it('explains what is wrong with other URLs', () => {
    expect(databaseUrlIssues(undefined)).toEqual([expect.stringMatching(/^DATABASE_URL is not set in this shell/)]);
    expect(databaseUrlIssues('')).toEqual([expect.stringMatching(/^DATABASE_URL is not set/)]);
    expect(databaseUrlIssues('neon please')).toEqual(['DATABASE_URL is not a URL']);
    expect(databaseUrlIssues('mysql://db.shop.test/shop')).toEqual(['DATABASE_URL must start with postgres:// or postgresql://']);
    expect(databaseUrlIssues('postgres://postgres@127.0.0.1:5432/postgres?sslmode=require')).toEqual([
      'DATABASE_URL points at 127.0.0.1, which a deployed Worker cannot reach',
    ]);
    expect(databaseUrlIssues(NEON.replace('?sslmode=require', ''))).toEqual([
      'DATABASE_URL must use TLS: add ?sslmode=require (the Worker refuses it otherwise)',
    ]);
  });
});

describe('redactUrl', () => {
  it('hides the password only', () => {
    expect(redactUrl(NEON)).toBe('postgres://app:***@ep-quiet-sun-123456.eu-central-1.aws.neon.tech/neondb?sslmode=require');
    expect(redactUrl('postgres://postgres@127.0.0.1:5432/postgres')).toBe('postgres://postgres@127.0.0.1:5432/postgres');
    expect(redactUrl('::')).toBe('(unparseable URL)');
  });
});
