/**
 * The address guard of projects' webhooks (the SSRF guard): which addresses are allowed, written
 * in the URL in any of its forms or resolved from a name; that a refusal says only that the
 * address is not allowed; and that names are resolved within a real timeout without holding one
 * of libuv's threads. Names are answered by a stand-in name server on 127.0.0.1
 * (test/support/dns-server.ts).
 */
import { pbkdf2 } from 'node:crypto';
import { lookup } from 'node:dns/promises';
import { NoticeFailedError, NoticeRefusedError } from '../src/notifications/errors';
import { ADDRESS_NOT_ALLOWED, addressAllowed, checkWebhookAddress, MAX_ADDRESSES_PER_FAMILY, resolveWebhookName, WebhookAddressError } from '../src/notifications/webhook-address';
import { deliverWebhook } from '../src/notifications/webhooks';
import type { Notice } from '../src/domain/notices';
import { startDnsStandIn, type DnsStandIn } from './support/dns-server';
import { startWebhookReceiver } from './support/notice-receiver';

const notice: Notice = { id: 'notice-1', eventType: 'host.failed', occurredMs: Date.UTC(2026, 10, 22, 3), details: { host: 'compute-1' } };

describe('which addresses a project webhook may reach', () => {
  it.each([
    // IPv4: public unicast only.
    ['127.0.0.1', false],
    ['127.255.255.254', false],
    ['10.1.2.3', false],
    ['172.16.0.9', false],
    ['172.31.255.255', false],
    ['192.168.1.1', false],
    ['169.254.169.254', false],
    ['100.64.0.1', false],
    ['100.127.255.254', false],
    ['0.0.0.0', false],
    ['0.1.2.3', false],
    ['224.0.0.1', false],
    ['239.255.255.250', false],
    ['255.255.255.255', false],
    ['240.0.0.1', false],
    ['192.0.0.8', false],
    ['192.0.2.1', false],
    ['198.51.100.7', false],
    ['203.0.113.9', false],
    ['198.18.0.1', false],
    ['192.88.99.1', false],
    ['8.8.8.8', true],
    ['1.1.1.1', true],
    ['172.32.0.1', true],
    ['100.128.0.1', true],
    ['169.255.0.1', true],
    // IPv6 outside global unicast (2000::/3).
    ['::', false],
    ['::1', false],
    ['fe80::1', false],
    ['fec0::1', false],
    ['fc00::1', false],
    ['fd00::1', false],
    ['ff02::1', false],
    ['ff0e::1', false],
    ['100::1', false],
    ['4000::1', false],
    ['e000::1', false],
    // Special-purpose ranges inside 2000::/3: documentation, benchmarking, AMT, AS112, ORCHID, drone tags, SRv6 SIDs.
    ['2001:db8::1', false],
    ['3fff::1', false],
    ['2001:2::1', false],
    ['2001:3::1', false],
    ['2001:4:112::1', false],
    ['2620:4f:8000::1', false],
    ['2001:10::1', false],
    ['2001:20::1', false],
    ['2001:30::1', false],
    ['5f00::1', false],
    ['2606:4700:4700::1111', true],
    ['2001:4860:4860::8888', true],
    ['2a00:1450:4001:80b::200e', true],
    // IPv6 that embeds an IPv4 address: judged as that address.
    ['::ffff:127.0.0.1', false], // IPv4-mapped
    ['::ffff:10.0.0.1', false],
    ['::ffff:169.254.169.254', false],
    ['::ffff:8.8.8.8', true],
    ['::a9fe:a9fe', false], // IPv4-compatible ::169.254.169.254
    ['::7f00:1', false], // ::127.0.0.1
    ['::a00:1', false], // ::10.0.0.1
    ['::808:808', true], // ::8.8.8.8
    ['::ffff:0:a00:1', false], // IPv4-translated 10.0.0.1
    ['::ffff:0:808:808', true],
    ['64:ff9b::a9fe:a9fe', false], // NAT64
    ['64:ff9b::7f00:1', false],
    ['64:ff9b::808:808', true],
    ['64:ff9b:1::a00:1', false], // NAT64 local use: where the IPv4 address sits is the network's choice
    ['2002:a9fe:a9fe::1', false], // 6to4
    ['2002:7f00:1::1', false],
    ['2002:808:808::1', true],
    ['2001:0:808:808::f5ff:fffe', false], // Teredo: server 8.8.8.8, client 10.0.0.1 (obfuscated)
    ['2001:0:a00:1::f7f7:f7f7', false], // Teredo: server 10.0.0.1, client 8.8.8.8
    ['2001:0:808:808::f7f7:f7f7', true], // Teredo: both public
    // Not an address at all.
    ['example.com', false],
    ['', false],
  ])('%s: allowed %p', (address, allowed) => {
    expect(addressAllowed(address)).toBe(allowed);
  });

  it.each([
    // The three, as the WHATWG parser writes them ([::a9fe:a9fe]…).
    'http://[::169.254.169.254]/latest/meta-data/',
    'http://[::127.0.0.1]/',
    'http://[::10.0.0.1]/',
    'http://[::ffff:169.254.169.254]/',
    'http://[::ffff:0:169.254.169.254]/',
    'http://[64:ff9b::169.254.169.254]/',
    'http://[2002:a9fe:a9fe::]/',
    'http://[2001:db8::1]/',
    'http://[::1]:8080/hook',
    'http://[fd00::1]/hook',
    'http://127.0.0.1/hook',
    'http://2130706433/hook', // 127.0.0.1
    'http://0x7f.1/hook',
    'http://0251.0376.0251.0376/latest/meta-data', // 169.254.169.254 in octal
    'http://169.254.169.254./latest/meta-data',
    'http://10.0.0.5/hook',
    'http://100.64.0.1/hook',
  ])('refuses %s where it is set, saying only that the address is not allowed', async (url) => {
    const refusal = await checkWebhookAddress(url, { allowPrivate: false }).catch((err: unknown) => err);
    expect(refusal).toBeInstanceOf(WebhookAddressError);
    expect(refusal).toMatchObject({ kind: 'not-allowed', message: ADDRESS_NOT_ALLOWED });
    // LK_WEBHOOK_ALLOW_PRIVATE: the operator's allowance lets it through.
    await expect(checkWebhookAddress(url, { allowPrivate: true })).resolves.toBeUndefined();
  });

  it('lets public addresses through', async () => {
    for (const url of ['https://1.1.1.1/hook', 'https://[2606:4700:4700::1111]/hook', 'http://[::ffff:8.8.8.8]/hook', 'http://[64:ff9b::8.8.8.8]/hook']) {
      await expect(checkWebhookAddress(url, { allowPrivate: false })).resolves.toBeUndefined();
    }
  });
});

describe('names, resolved by a stand-in name server', () => {
  let names: DnsStandIn;
  const dnsWith = (timeoutMs: number) => ({ servers: [names.server], timeoutMs });

  beforeAll(async () => {
    names = await startDnsStandIn({
      'internal.test': ['10.0.0.5'],
      'metadata.test': ['::a9fe:a9fe'], // AAAA only: ::169.254.169.254
      'mapped.test': ['::ffff:127.0.0.1'],
      'mixed.test': ['1.1.1.1', '10.0.0.1'],
      'mixed6.test': ['1.1.1.1', 'fd00::1'],
      'public.test': ['1.1.1.1', '2606:4700:4700::1111'],
      'many.test': Array.from({ length: 20 }, (_, i) => `8.8.4.${i + 1}`),
      'loopback-hook.test': ['127.0.0.1'],
      'hung.test': 'no answer',
    });
  });
  afterAll(() => names.close());

  it.each(['internal.test', 'metadata.test', 'mapped.test', 'mixed.test', 'mixed6.test', 'localhost', 'api.localhost'])(
    'refuses %s (resolving to an address not allowed), never saying what it resolves to',
    async (name) => {
      const refusal = await checkWebhookAddress(`https://${name}/hook`, { allowPrivate: false, dns: dnsWith(2_000) }).catch((err: unknown) => err);
      expect(refusal).toBeInstanceOf(WebhookAddressError);
      expect(refusal).toMatchObject({ kind: 'not-allowed', message: ADDRESS_NOT_ALLOWED });
      await expect(checkWebhookAddress(`https://${name}/hook`, { allowPrivate: true, dns: dnsWith(2_000) })).resolves.toBeUndefined();
    },
  );

  it("asks for A and AAAA records, allows a name whose addresses are all public, and considers at most MAX_ADDRESSES_PER_FAMILY of each family", async () => {
    const asked = names.questions.length;
    await expect(checkWebhookAddress('https://public.test/hook', { allowPrivate: false, dns: dnsWith(2_000) })).resolves.toBeUndefined();
    expect(names.questions.slice(asked).sort()).toEqual(['public.test A', 'public.test AAAA']);
    expect(await resolveWebhookName('public.test', dnsWith(2_000))).toEqual([
      { address: '1.1.1.1', family: 4 },
      { address: '2606:4700:4700::1111', family: 6 },
    ]);
    const many = await resolveWebhookName('many.test', dnsWith(2_000));
    expect(many).toEqual(Array.from({ length: MAX_ADDRESSES_PER_FAMILY }, (_, i) => ({ address: `8.8.4.${i + 1}`, family: 4 })));
  });

  it('refuses a name that does not resolve, and one whose name server does not answer within the timeout', async () => {
    const unknown = await checkWebhookAddress('https://nowhere.test/hook', { allowPrivate: true, dns: dnsWith(2_000) }).catch((err: unknown) => err);
    expect(unknown).toBeInstanceOf(WebhookAddressError);
    expect(unknown).toMatchObject({ kind: 'unresolved', code: 'ENOTFOUND', message: 'nowhere.test does not resolve' });
    const hung = await checkWebhookAddress('https://hung.test/hook', { allowPrivate: true, dns: dnsWith(300) }).catch((err: unknown) => err);
    expect(hung).toBeInstanceOf(WebhookAddressError);
    expect(hung).toMatchObject({ kind: 'unresolved', code: 'ETIMEOUT', message: 'hung.test did not resolve within 300 ms' });
  });

  it("holds none of libuv's threads while name servers do not answer: the process's other name lookups and thread-pool tasks complete meanwhile", async () => {
    // As many hung lookups as libuv has threads (4 unless UV_THREADPOOL_SIZE says otherwise), each with its own name.
    const threads = Number(process.env.UV_THREADPOOL_SIZE ?? 4);
    for (let i = 0; i < threads; i++) names.records.set(`hung-${i}.test`, 'no answer');
    const asked = names.questions.length;
    let settled = 0;
    const lookups = Array.from({ length: threads }, (_, i) =>
      checkWebhookAddress(`https://hung-${i}.test/hook`, { allowPrivate: false, dns: dnsWith(3_000) }).then(
        () => undefined,
        (err: unknown) => err,
      ).finally(() => settled++),
    );
    // Every lookup has asked the stand-in (A and AAAA each), or they are all over.
    await Promise.race([names.questionsReceived(asked + 2 * threads), Promise.all(lookups)]);
    expect(new Set(names.questions.slice(asked))).toEqual(new Set(Array.from({ length: threads }, (_, i) => [`hung-${i}.test A`, `hung-${i}.test AAAA`]).flat()));
    // Both run on libuv's thread pool (getaddrinfo among its slow tasks, of which libuv runs at most half its threads
    // at once): they complete while every webhook lookup is still waiting for its answer.
    await new Promise<void>((resolve, reject) => pbkdf2('secret', 'salt', 1, 32, 'sha256', (err) => (err ? reject(err) : resolve())));
    expect(await lookup('localhost', { family: 4 })).toEqual({ address: '127.0.0.1', family: 4 });
    expect(settled).toBe(0);
    for (const outcome of await Promise.all(lookups)) {
      expect(outcome).toBeInstanceOf(WebhookAddressError);
      expect(outcome).toMatchObject({ kind: 'unresolved', code: 'ETIMEOUT' });
    }
  });

  it('checks the addresses again at the connection: refused (final) when one is not allowed, a failure (retried) when the name does not resolve', async () => {
    const hook = await startWebhookReceiver();
    try {
      const url = `http://loopback-hook.test:${hook.port}/hook`;
      const refusal = await deliverWebhook({ url }, notice, { timeoutMs: 5_000, guardAddresses: true, dns: dnsWith(2_000) }).catch((err: unknown) => err);
      expect(refusal).toBeInstanceOf(NoticeRefusedError);
      expect((refusal as Error).message).toBe(`notice to http://loopback-hook.test:${hook.port} refused: ${ADDRESS_NOT_ALLOWED}`);
      const localhost = await deliverWebhook({ url: `http://localhost:${hook.port}/hook` }, notice, { timeoutMs: 5_000, guardAddresses: true, dns: dnsWith(2_000) }).catch((err: unknown) => err);
      expect(localhost).toBeInstanceOf(NoticeRefusedError);
      expect((localhost as Error).message).toBe(`notice to http://localhost:${hook.port} refused: ${ADDRESS_NOT_ALLOWED}`);
      const literal = await deliverWebhook({ url: `http://[::127.0.0.1]:${hook.port}/hook` }, notice, { timeoutMs: 5_000, guardAddresses: true }).catch((err: unknown) => err);
      expect(literal).toBeInstanceOf(NoticeRefusedError);
      expect((literal as Error).message).toBe(`notice to http://[::7f00:1]:${hook.port} refused: ${ADDRESS_NOT_ALLOWED}`);
      expect(hook.requests).toHaveLength(0); // never connected
      // Unguarded (LK_WEBHOOK_ALLOW_PRIVATE), the same name resolves through the same resolver and is delivered.
      expect((await deliverWebhook({ url }, notice, { timeoutMs: 5_000, guardAddresses: false, dns: dnsWith(2_000) })).status).toBe(204);
      expect(hook.requests).toHaveLength(1);
      const hung = await deliverWebhook({ url: `http://hung.test:${hook.port}/hook` }, notice, { timeoutMs: 5_000, guardAddresses: true, dns: dnsWith(300) }).catch((err: unknown) => err);
      expect(hung).toBeInstanceOf(NoticeFailedError);
      expect((hung as Error).message).toBe(`notice to http://hung.test:${hook.port} failed: ETIMEOUT`);
    } finally {
      await hook.close();
    }
  });
});
