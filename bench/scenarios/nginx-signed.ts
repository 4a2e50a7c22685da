/**
 * Repeated guarded views of one signed URL through nginx (docs/serving.md, "nginx: signed views decided
 * once": `auth_request` to the decision route, its answer kept in `proxy_cache` by the URL) against nginx
 * serving the same 50 KB file alone; beside it, for the comparison of the two modules, the same file behind
 * `secure_link` (nginx checks an MD5 link alone, never asking the server; not what docs/serving.md chose).
 * Then a page of distinct signed URLs (every view the first of its URL, each decided by the server)
 * through nginx against the same distinct views answered by the server alone.
 */
import { createHash } from 'node:crypto'
import { existsSync } from 'node:fs'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { type FrontServer, NGINX } from '../../packages/attach-storage/src/testing/front-servers.js'
import { startSignedNginx } from '../../packages/attach-storage/src/testing/nginx-signed.js'
import { UrlSigner } from '../../packages/attach-storage/src/service/signing.js'
import { paddedJpeg } from '../lib/files.js'
import { jsonCall, request, uploadMultipart } from '../lib/http.js'
import { type Reference, startReference } from '../lib/reference.js'
import { fmtCpuPerReq, fmtRps, judge, MiB, target, type Context } from '../lib/report.js'
import { distinctPathsScript, ensureWrk, type WrkMeasured, wrkEach } from '../lib/wrk.js'
import { lat, SMALL, wrkTimes } from './small-views.js'

const SIGNING = 'attach-storage-bench-signing-secret'
const MD5_SECRET = 'attach-storage-bench-md5-secret'

export async function nginxSignedBench(ctx: Context): Promise<void> {
  const figure = '50 KB guarded views/s of one signed URL through nginx'
  const w = ensureWrk(ctx.log)
  if (!w.ok) return ctx.skip('views-50k-nginx-signed', figure, w.reason)
  if (!existsSync(NGINX)) return ctx.skip('views-50k-nginx-signed', figure, `${NGINX} is missing: apt-get install nginx-light`)
  const dir = await mkdtemp(join(ctx.work, 'signed-'))
  const file = await paddedJpeg(join(dir, 'photo.jpg'), SMALL)
  const config = join(dir, 'x-accel.json')
  // Signed URLs live up to an hour, so that a page of distinct ones can be signed for a few records.
  const signing = { ttl: '1h' }
  await writeFile(
    config,
    JSON.stringify({
      attach: { signing, stores: { local: { type: 'local', serve: 'x-accel-redirect', 'serve-location': '/_attach/local/' } } },
    }),
  )
  const plainConfig = join(dir, 'plain.json')
  await writeFile(plainConfig, JSON.stringify({ attach: { signing } }))
  let ours: Reference | undefined
  let alone: Reference | undefined
  let nginx: FrontServer | undefined
  try {
    ours = await startReference(ctx.work, 100 * MiB, 'hono-app', 'attach-storage (signed views)', {
      ATTACH_CONFIG: config,
      ATTACH_SIGNING_SECRET: SIGNING,
    })
    const id = await savePrivate(ours, file)
    const expires = Math.floor(Date.now() / 1000) + 3600
    const md5 = createHash('md5').update(`${expires}/_md5/photo.jpg ${MD5_SECRET}`).digest('base64url')
    nginx = await startSignedNginx({
      upstreamPort: ours.port,
      assetsPrefix: '/assets/storage',
      apiPrefix: '/api/storage',
      store: { location: '/_attach/local/', baseDir: join(ours.dataDir, 'files') },
      boundSeconds: 60,
      public: { location: '/static/', root: dir },
      extra: `    location /_md5/ {
      secure_link $arg_md5,$arg_expires;
      secure_link_md5 "$secure_link_expires$uri ${MD5_SECRET}";
      if ($secure_link = "") { return 403; }
      if ($secure_link = "0") { return 410; }
      alias ${dir}/;
    }
`,
      workers: 2,
    })
    const signer = new UrlSigner(SIGNING, 10 * 60_000, () => new Date())
    const targets = [
      {
        label: 'attach-storage signed view/{id} through nginx (auth_request + proxy_cache)',
        url: `${nginx.url}/assets/storage/attach/view/${id}?${signer.query(id)}`,
        pid: ours.pid,
      },
      { label: 'nginx serving the file alone (ceiling)', url: `${nginx.url}/static/photo.jpg`, pid: ours.pid },
      {
        label: 'nginx secure_link (MD5) serving the file',
        url: `${nginx.url}/_md5/photo.jpg?md5=${md5}&expires=${expires}`,
        pid: ours.pid,
      },
    ]
    for (const t of targets) {
      const r = await request(t.url, { keep: 1024 })
      if (r.status !== 200 || r.bytes !== SMALL) throw new Error(`${t.label}: ${r.status}, ${r.bytes} bytes`)
    }
    const [s, n, m] = (await wrkEach(targets, { ...wrkTimes(ctx), log: ctx.log })) as [WrkMeasured, WrkMeasured, WrkMeasured]
    ctx.add({
      scenario: 'views-50k-nginx-signed',
      figure,
      subject: s.label,
      value: fmtRps(s.rps),
      rss: s.rssGrowth,
      cpu: `${fmtCpuPerReq(s.cpu, s.requests)} (Node)`,
      ratio: s.rps / n.rps,
      target: target('>=', 0.5),
      status: judge(s.rps / n.rps, '>=', 0.5),
      note: `of nginx alone; ${lat(s)}`,
    })
    ctx.add({ scenario: 'views-50k-nginx-signed', figure, subject: `${n.label} (info)`, value: fmtRps(n.rps), status: '', note: lat(n) })
    ctx.add({
      scenario: 'views-50k-nginx-signed',
      figure,
      subject: `${m.label} (info, not chosen)`,
      value: fmtRps(m.rps),
      ratio: m.rps / n.rps,
      status: '',
      note: `of nginx alone; ${lat(m)}`,
    })

    // A page of distinct signed URLs: records × expiries, each URL asked once.
    alone = await startReference(ctx.work, 100 * MiB, 'hono-app', 'attach-storage (signed views, no nginx)', {
      ATTACH_CONFIG: plainConfig,
      ATTACH_SIGNING_SECRET: SIGNING,
    })
    const records = ctx.quick ? 4 : 40
    const idsThere: number[] = [id]
    const idsAlone: number[] = []
    for (let i = 0; i < records; i++) {
      if (i > 0) idsThere.push(await savePrivate(ours, file))
      idsAlone.push(await savePrivate(alone, file))
    }
    const now = Math.floor(Date.now() / 1000)
    // Measured: expiries 120 s to 3500 s ahead (a URL per record and second); warm-up: 60 to 119 s ahead.
    const [from, to] = [120, 3500]
    const urls = records * (to - from + 1)
    const pages = async (name: string, ids: number[]) => ({
      script: await distinctPathsScript(join(dir, `${name}.lua`), signedPaths(signer, ids, now + from, now + to)),
      warmScript: await distinctPathsScript(join(dir, `${name}-warm.lua`), signedPaths(signer, ids, now + 60, now + from - 1)),
    })
    const distinct = [
      {
        label: 'attach-storage distinct signed view/{id} URLs through nginx (each decided once)',
        url: nginx.url,
        pid: ours.pid,
        ...(await pages('there', idsThere)),
      },
      {
        label: 'attach-storage distinct signed view/{id} URLs, Node only',
        url: alone.base,
        pid: alone.pid,
        ...(await pages('alone', idsAlone)),
      },
    ]
    const [d, a] = (await wrkEach(distinct, { ...wrkTimes(ctx), log: ctx.log })) as [WrkMeasured, WrkMeasured]
    if (d.requests > urls || a.requests > urls) throw new Error(`more requests than distinct URLs: ${d.requests}, ${a.requests} of ${urls}`)
    ctx.add({
      scenario: 'views-50k-nginx-signed',
      figure: '50 KB guarded views/s of distinct signed URLs',
      subject: d.label,
      value: fmtRps(d.rps),
      rss: d.rssGrowth,
      cpu: `${fmtCpuPerReq(d.cpu, d.requests)} (Node)`,
      ratio: d.rps / a.rps,
      // No target: every view here is a first one, which nginx pays with a subrequest and a cache entry
      // on disk; the row says what a page of first views costs behind nginx against the server alone.
      status: '',
      note: `info: of the Node-only view; ${lat(d)}; ${urls} URLs, none asked twice`,
    })
    ctx.add({
      scenario: 'views-50k-nginx-signed',
      figure: '50 KB guarded views/s of distinct signed URLs',
      subject: `${a.label} (info)`,
      value: fmtRps(a.rps),
      rss: a.rssGrowth,
      cpu: fmtCpuPerReq(a.cpu, a.requests),
      status: '',
      note: lat(a),
    })
  } finally {
    await nginx?.stop()
    await alone?.stop()
    await ours?.stop()
    await rm(dir, { recursive: true, force: true })
  }
}

let saves = 0

/** Uploads the file into the guarded category `demo/private` and saves it: the record's id. */
async function savePrivate(ref: Reference, file: string): Promise<number> {
  const up = await uploadMultipart(
    `${ref.base}/api/storage/attach/tmp`,
    { refDomain: 'demo', refCategory: 'private' },
    [{ field: 'fileMap', path: file }],
    { authorization: `Bearer ${ref.bearer}` },
  )
  if (up.status !== 200) throw new Error(`temporary upload: ${up.status} ${up.body?.toString().slice(0, 300)}`)
  const item = JSON.parse(up.body!.toString()).files[0]
  const saved = await jsonCall(
    `${ref.base}/api/storage/attach/demo/signed${++saves}`,
    'POST',
    { private: [{ savedName: item.name, displayName: 'photo.jpg' }] },
    ref.bearer,
  )
  return saved.attachList.at(-1).id as number
}

/** Signed view paths of each record for every expiry second from `from` to `to`, interleaved by record. */
function signedPaths(signer: UrlSigner, ids: number[], from: number, to: number): string[] {
  const paths: string[] = []
  for (let exp = from; exp <= to; exp++) {
    for (const id of ids) paths.push(`/assets/storage/attach/view/${id}?${signer.queryUntil(id, exp)}`)
  }
  return paths
}
