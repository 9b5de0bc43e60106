import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { webhooksBody } from '../src/api/webhooks';
import { ConfigError, externalFilterSettingsFromEnv, loadConfig, openStackSettingsFromEnv } from '../src/config';
import { DEFAULT_PREEMPT_WARNING_MS } from '../src/domain/preemption';

describe('configuration', () => {
  it('has documented defaults for an empty environment', () => {
    const config = loadConfig({ HOME: '/home/someone' });
    expect(config.api).toEqual({
      host: '127.0.0.1',
      port: 1234,
      authStrategy: 'noauth',
      noauthProjectId: 'admin',
      authCacheMs: 60_000,
      authTimeoutMs: 5_000,
      adminProject: { id: undefined, name: 'admin', domainId: 'default' },
      workflowTimeoutMs: 30_000,
      admission: 'api',
      publicUrl: 'http://127.0.0.1:1234',
      server: { requestTimeoutMs: 30_000, headersTimeoutMs: 10_000, maxConnections: 1_000 },
      signIn: { failuresPerUser: 10, failuresPerAddress: 30, windowMs: 300_000 },
      trustProxy: false,
      metrics: { listen: undefined, token: undefined, cacheMs: 5_000 },
    });
    expect(config.leaseLimits).toEqual({ maxDurationMs: 7 * 86_400_000, maxAdvanceMs: 365 * 86_400_000, maxLeases: 50 });
    expect(config.healthDeepIntervalMs).toBe(10_000);
    expect(config.temporal).toMatchObject({ address: '127.0.0.1:7233', external: false, topology: 'dev', namespace: 'default', taskQueue: 'leasekeeper', uiPort: 8233 });
    expect(config.database).toMatchObject({ url: 'postgres://leasekeeper@127.0.0.1:15432/leasekeeper', external: false });
    expect(config.cacheDir).toBe('/home/someone/.cache/leasekeeper');
    expect(config.worker.maxCachedWorkflows).toBe(2_000);
    expect(config.outbox).toEqual({ sweepMs: 1_000, graceMs: 2_000, preemptionWarningMs: 600_000 });
    expect(config.preemption).toEqual({ evictionMs: 120_000, chargeFactor: 0.25, warningMs: 600_000 });
    // What the parts built without the setting (tests) fall back on is the same warning.
    expect(config.preemption.warningMs).toBe(DEFAULT_PREEMPT_WARNING_MS);
  });

  it('charges preemptible hours by a factor from 0 to 1 written as a plain decimal, and names any other value', () => {
    for (const [text, factor] of [['0', 0], ['1', 1], ['0.5', 0.5], ['.125', 0.125], ['1.000', 1], ['0.000001', 0.000001], ['', 0.25]] as const) {
      expect(loadConfig({ LK_PREEMPTIBLE_CHARGE_FACTOR: text }).preemption.chargeFactor).toBe(factor);
    }
    for (const text of ['1.5', '-0.1', 'abc', '0x1', '1e-1', ' 0.5', '0.0000001', 'NaN', 'Infinity', '2']) {
      expect(() => loadConfig({ LK_PREEMPTIBLE_CHARGE_FACTOR: text })).toThrow(
        `invalid configuration: LK_PREEMPTIBLE_CHARGE_FACTOR=${JSON.stringify(text)}: expected a number from 0 to 1 with at most 6 decimals, such as 0.25`,
      );
    }
  });

  it('takes the preemption warning in minutes to the second, and names a value finer than that', () => {
    for (const [text, ms] of [['10', 600_000], ['0.25', 15_000], ['0.3', 18_000], ['0', 0], ['1440', 86_400_000]] as const) {
      expect(loadConfig({ LK_PREEMPT_WARNING_MINUTES: text }).outbox.preemptionWarningMs).toBe(ms);
    }
    for (const text of ['0.001', '-1', '1441', 'abc']) {
      expect(() => loadConfig({ LK_PREEMPT_WARNING_MINUTES: text })).toThrow(/LK_PREEMPT_WARNING_MINUTES/);
    }
  });

  it('derives the local database and Temporal addresses from their ports', () => {
    const config = loadConfig({ LK_PG_PORT: '25432', LK_TEMPORAL_PORT: '17233' });
    expect(config.database.url).toBe('postgres://leasekeeper@127.0.0.1:25432/leasekeeper');
    expect(config.temporal.address).toBe('127.0.0.1:17233');
  });

  it('runs temporal-server on PostgreSQL with LK_TEMPORAL=server, and names the choices for anything else', () => {
    expect(loadConfig({ LK_TEMPORAL: 'server' }).temporal.topology).toBe('server');
    expect(() => loadConfig({ LK_TEMPORAL: 'kubernetes' })).toThrow('invalid configuration: LK_TEMPORAL="kubernetes": Invalid option: expected one of "dev"|"server"');
  });

  it("serves the worker's metrics only on a port that leaves the next one for the SDK's", () => {
    expect(loadConfig({}).worker.metrics).toBeUndefined();
    expect(loadConfig({ LK_WORKER_METRICS_PORT: '9464' }).worker.metrics).toEqual({ host: '127.0.0.1', port: 9464 });
    expect(() => loadConfig({ LK_WORKER_METRICS_PORT: '65535' })).toThrow(/^invalid configuration: LK_WORKER_METRICS_PORT="65535": /);
  });

  it("reads Nova's notifications from a RabbitMQ transport URL, and never shows its password in a refusal", () => {
    expect(loadConfig({}).hostMonitor.notificationsUrl).toBeUndefined();
    expect(loadConfig({ LK_NOVA_NOTIFICATIONS_URL: 'rabbit://nova:secret@rabbit1:5672,nova:secret@rabbit2:5672/nova?ssl=1' }).hostMonitor.notificationsUrl).toBe(
      'rabbit://nova:secret@rabbit1:5672,nova:secret@rabbit2:5672/nova?ssl=1',
    );
    expect(loadConfig({ LK_NOVA_NOTIFICATIONS_URL: 'amqp://guest:guest@127.0.0.1:15672/' }).hostMonitor.notificationsUrl).toBe('amqp://guest:guest@127.0.0.1:15672/');
    for (const url of ['http://nova:secret@rabbit:5672/', 'rabbit://', 'rabbit://nova:secret@rab bit:5672/', `rabbit://nova:secret@${'r'.repeat(2_048)}:5672/`]) {
      expect(() => loadConfig({ LK_NOVA_NOTIFICATIONS_URL: url })).toThrow(/^invalid configuration: LK_NOVA_NOTIFICATIONS_URL=/);
    }
    expect(() => loadConfig({ LK_NOVA_NOTIFICATIONS_URL: 'kafka://nova:secret@k1:9092,nova:other@k2:9092/' })).toThrow(
      'invalid configuration: LK_NOVA_NOTIFICATIONS_URL="kafka://nova:***@k1:9092,nova:***@k2:9092/": expected rabbit://user:password@host:port/vhost',
    );
  });

  it('uses existing servers when their addresses are given', () => {
    const config = loadConfig({ TEMPORAL_ADDRESS: 'temporal.internal:7233', DATABASE_URL: 'postgresql://u:p@db:5432/lk' });
    expect(config.temporal).toMatchObject({ address: 'temporal.internal:7233', external: true });
    expect(config.database).toMatchObject({ url: 'postgresql://u:p@db:5432/lk', external: true });
  });

  it('links to the public URL, by default the listen address', () => {
    expect(loadConfig({ LK_API_HOST: '127.0.0.2', LK_API_PORT: '8080' }).api.publicUrl).toBe('http://127.0.0.2:8080');
    expect(loadConfig({ LK_API_HOST: '::1' }).api.publicUrl).toBe('http://[::1]:1234');
    expect(loadConfig({ LK_PUBLIC_URL: 'https://reservation.example.org/' }).api.publicUrl).toBe('https://reservation.example.org');
  });

  it('refuses noauth on a non-loopback address unless allowed', () => {
    expect(() => loadConfig({ LK_API_HOST: '0.0.0.0' })).toThrow(
      new ConfigError(
        'invalid configuration: LK_API_HOST="0.0.0.0": noauth (LK_AUTH_STRATEGY) trusts identity headers, so it listens on loopback only; set LK_AUTH_STRATEGY=keystone, or LK_ALLOW_NOAUTH_REMOTE=true if the address is reachable only by trusted callers',
      ),
    );
    expect(() => loadConfig({ LK_API_HOST: '192.0.2.7' })).toThrow(ConfigError);
    expect(loadConfig({ LK_API_HOST: '0.0.0.0', LK_ALLOW_NOAUTH_REMOTE: 'true' }).api.host).toBe('0.0.0.0');
    expect(loadConfig({ LK_API_HOST: '0.0.0.0', LK_AUTH_STRATEGY: 'keystone' }).api.host).toBe('0.0.0.0');
    for (const host of ['127.0.0.1', 'localhost', '::1', '127.1.2.3']) expect(loadConfig({ LK_API_HOST: host }).api.host).toBe(host);
  });

  it('caps the Keystone validation cache at 5 minutes', () => {
    expect(loadConfig({ LK_AUTH_CACHE_SECONDS: '300' }).api.authCacheMs).toBe(300_000);
    expect(() => loadConfig({ LK_AUTH_CACHE_SECONDS: '301' })).toThrow(/^invalid configuration: LK_AUTH_CACHE_SECONDS="301": /);
  });

  it('trusts no proxy unless told: a hop count, or the proxies\' addresses and subnets (never any address at all)', () => {
    expect(loadConfig({ LK_API_TRUST_PROXY: '1' }).api.trustProxy).toBe(1);
    expect(loadConfig({ LK_API_TRUST_PROXY: 'false' }).api.trustProxy).toBe(false);
    expect(loadConfig({ LK_API_TRUST_PROXY: 'loopback, 10.0.0.0/8,2001:db8::/32' }).api.trustProxy).toEqual(['loopback', '10.0.0.0/8', '2001:db8::/32']);
    for (const value of ['true', '10.0.0.0/33', 'proxy.example', '11']) {
      expect(() => loadConfig({ LK_API_TRUST_PROXY: value })).toThrow(/^invalid configuration: LK_API_TRUST_PROXY=/);
    }
  });

  it('serves the API\'s metrics on their own address when LK_API_METRICS_PORT is set, and refuses a short token', () => {
    expect(loadConfig({ LK_API_METRICS_PORT: '9465' }).api.metrics.listen).toEqual({ host: '127.0.0.1', port: 9465 });
    expect(() => loadConfig({ LK_API_METRICS_TOKEN: 'secret' })).toThrow(/^invalid configuration: LK_API_METRICS_TOKEN="\*\*\*": expected at least 16 characters$/);
  });

  it("reads power management's settings: the idle threshold as a duration, the programs as JSON argv arrays", () => {
    expect(loadConfig({}).power).toEqual({
      planner: false, parallel: 8, bootPollMs: 10_000, offAfterIdleMs: 2 * 3_600_000, marginMs: 300_000, defaultBootMs: 600_000, bootSamples: 5, resumeTimeoutMs: 600_000, recheckMs: 300_000, awakeReserve: 0, timeoutMs: 60_000, commands: undefined, ipmiCipherSuite: undefined,
    });
    expect(loadConfig({ LK_POWER_AWAKE_RESERVE: '3' }).power.awakeReserve).toBe(3);
    const power = loadConfig({ LK_POWER_OFF_AFTER_IDLE: '90m', LK_POWER_COMMAND_ON: '["/usr/local/sbin/pdu", "on"]', LK_POWER_COMMAND_OFF: '["/usr/local/sbin/pdu", "off"]', LK_POWER_IPMI_CIPHER_SUITE: '17' }).power;
    expect(power).toMatchObject({ offAfterIdleMs: 90 * 60_000, commands: { on: ['/usr/local/sbin/pdu', 'on'], off: ['/usr/local/sbin/pdu', 'off'], status: undefined }, ipmiCipherSuite: 17 });
    expect(() => loadConfig({ LK_POWER_COMMAND_ON: '["/usr/local/sbin/pdu"]' })).toThrow(/LK_POWER_COMMAND_ON and LK_POWER_COMMAND_OFF go together/);
    // The margin above the threshold would let a host just woken be put back to sleep.
    expect(() => loadConfig({ LK_POWER_OFF_AFTER_IDLE: '1m', LK_POWER_WAKE_MARGIN_SECONDS: '61' })).toThrow(/LK_POWER_WAKE_MARGIN_SECONDS=61: must be at most LK_POWER_OFF_AFTER_IDLE/);
    // A boot and its resume time-out of 25 minutes or more outlast the start's wait for a boot (the start's activity has 30 minutes in all).
    expect(loadConfig({ LK_POWER_BOOT_SECONDS: '900', LK_POWER_RESUME_TIMEOUT_SECONDS: '599' }).power).toMatchObject({ defaultBootMs: 900_000, resumeTimeoutMs: 599_000 });
    expect(() => loadConfig({ LK_POWER_BOOT_SECONDS: '900', LK_POWER_RESUME_TIMEOUT_SECONDS: '600' })).toThrow(
      /^invalid configuration: LK_POWER_BOOT_SECONDS=900 \+ LK_POWER_RESUME_TIMEOUT_SECONDS=600: must be less than 1500 s in all \(a lease's start waits at most 25 minutes for a host's boot/,
    );
    expect(() => loadConfig({ LK_POWER_BOOT_SECONDS: '1800' })).toThrow(/LK_POWER_BOOT_SECONDS=1800 \+ LK_POWER_RESUME_TIMEOUT_SECONDS=600: must be less than 1500 s/);
  });

  it('treats an empty variable as unset', () => {
    expect(loadConfig({ LK_API_PORT: '' }).api.port).toBe(1234);
  });

  it.each([
    ['LK_API_PORT', 'http'],
    ['LK_API_PORT', '70000'],
    ['LK_LOG_LEVEL', 'loud'],
    ['TEMPORAL_ADDRESS', 'no-port'],
    ['DATABASE_URL', 'mysql://root@db/lk'],
    ['LK_WORKER_MAX_CACHED_WORKFLOWS', '0'],
    ['LK_NOAUTH_PROJECT_ID', 'has spaces'],
    ['LK_POWER_OFF_AFTER_IDLE', '2 hours'],
    ['LK_POWER_COMMAND_ON', 'pdu on'],
    ['LK_POWER_COMMAND_OFF', '["pdu", "off"]'],
    ['LK_POWER_IPMI_CIPHER_SUITE', '18'],
    ['LK_POWER_AWAKE_RESERVE', '-1'],
    ['LK_POWER_AWAKE_RESERVE', '1.5'],
    ['LK_POWER_AWAKE_RESERVE', '1001'],
  ])('rejects %s=%s with one line naming the variable', (name, value) => {
    let error: unknown;
    try {
      loadConfig({ [name]: value });
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(ConfigError);
    const message = (error as Error).message;
    expect(message).toContain(`${name}=${JSON.stringify(value)}`);
    expect(message).not.toContain('\n');
  });

  it("resolves projects' webhook names with the name servers given (at most 4, with their ports), within LK_WEBHOOK_DNS_TIMEOUT_MS", () => {
    expect(loadConfig({}).notices.dns).toEqual({ servers: undefined, timeoutMs: 3_000 });
    expect(loadConfig({ LK_WEBHOOK_DNS_SERVERS: '127.0.0.1:5353, 9.9.9.9,[::1]:53,2620:fe::fe', LK_WEBHOOK_DNS_TIMEOUT_MS: '500' }).notices.dns).toEqual({
      servers: ['127.0.0.1:5353', '9.9.9.9', '[::1]:53', '2620:fe::fe'],
      timeoutMs: 500,
    });
    for (const value of ['dns.example', '127.0.0.1:0', '127.0.0.1:65536', '[127.0.0.1]:53', '::1:53x', '1.1.1.1,1.0.0.1,8.8.8.8,8.8.4.4,9.9.9.9']) {
      expect(() => loadConfig({ LK_WEBHOOK_DNS_SERVERS: value })).toThrow(/^invalid configuration: LK_WEBHOOK_DNS_SERVERS=/);
    }
    expect(() => loadConfig({ LK_WEBHOOK_DNS_TIMEOUT_MS: '30001' })).toThrow(/^invalid configuration: LK_WEBHOOK_DNS_TIMEOUT_MS="30001": /);
  });

  // One rule for every URL leasekeeper calls: the deployment's webhooks, projects' own, and Blazar's external filter.
  it.each([
    ['ftp://hooks.example/a', 'expected an http:// or https:// URL'],
    ['not a url', 'expected an http:// or https:// URL'],
    ['https://user:pw@hooks.example/a', 'expected no credentials in the URL (they would reach logs)'],
    [`https://hooks.example/${'a'.repeat(2_100)}`, 'expected at most 2048 characters'],
  ])('refuses %s alike wherever a URL is set', (url, problem) => {
    const refusal = (set: () => unknown) => {
      try {
        set();
      } catch (err) {
        return (err as Error).message;
      }
      return 'accepted';
    };
    for (const [name, set] of [
      ['LK_WEBHOOK_URLS', () => loadConfig({ LK_WEBHOOK_URLS: `https://hooks.example/ok,${url}` })],
      ['LK_NOTIFY_URL', () => loadConfig({ LK_NOTIFY_URL: url })],
      ['LK_POLICY_EXTERNAL_URL', () => externalFilterSettingsFromEnv({ LK_POLICY_EXTERNAL_URL: url })],
    ] as const) {
      const message = refusal(set);
      expect(message).toMatch(new RegExp(`^invalid configuration: ${name}=`));
      expect(message.endsWith(`: ${problem}`) ? problem : message).toBe(problem);
    }
    const parsed = webhooksBody.safeParse({ webhooks: [{ url }] });
    expect(parsed.success ? 'accepted' : parsed.error.issues[0].message).toBe(problem);
  });

  it('stops a process with exit code 2 and a one-line message', () => {
    const run = spawnSync(process.execPath, [path.join(__dirname, '..', 'dist', 'src', 'api', 'main.js')], {
      env: { ...process.env, LK_API_PORT: 'eighty' },
      encoding: 'utf8',
      timeout: 20_000,
    });
    expect(run.status).toBe(2);
    const lines = run.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^leasekeeper: invalid configuration: LK_API_PORT="eighty": .*number/);
  });
});

describe("OpenStack's client variables", () => {
  it('reads them trimmed (blank is unset), the password as written, the tenant names as the project', () => {
    const settings = openStackSettingsFromEnv({ HOME: '/home/someone', OS_CLOUD: '  ', OS_AUTH_URL: ' http://keystone:5000/v3 ', OS_PASSWORD: ' pw ', OS_TENANT_NAME: 'demo', OS_INTERFACE: 'internalURL' });
    expect(settings).toEqual({
      cloud: undefined,
      cloudsFile: undefined,
      secureFile: undefined,
      home: '/home/someone',
      password: expect.objectContaining({ authUrl: 'http://keystone:5000/v3', password: ' pw ', projectName: 'demo', interface: 'internalURL', username: undefined }),
    });
  });

  it('refuses an over-long value in one line naming the variable, a password never shown', () => {
    expect(() => openStackSettingsFromEnv({ OS_USERNAME: 'u'.repeat(256) })).toThrow(/^invalid configuration: OS_USERNAME="u+": expected at most 255 characters$/);
    let message = '';
    try {
      openStackSettingsFromEnv({ OS_PASSWORD: 'secret'.repeat(1_000) });
    } catch (err) {
      expect(err).toBeInstanceOf(ConfigError);
      message = (err as Error).message;
    }
    expect(message).toBe('invalid configuration: OS_PASSWORD="***": expected at most 4096 characters');
  });
});
