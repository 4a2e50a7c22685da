/**
 * Repeated guarded views of one signed URL through nginx (docs/serving.md, "nginx: signed views decided
 * once": `auth_request` to the decision route, its answer kept in `proxy_cache` by the URL) against nginx
 * serving the same 50 KB file alone; beside it, for the comparison of the two modules, the same file behind
 * `secure_link` (nginx checks an MD5 link alone, never asking the server; not what docs/serving.md chose).
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
import { startReference } from '../lib/reference.js'
import { fmtCpuPerReq, fmtRps, judge, MiB, target, type Context } from '../lib/report.js'
import { ensureWrk, type WrkMeasured, wrkEach } from '../lib/wrk.js'
import { SMALL, wrkTimes } from './small-views.js'

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
  await writeFile(
    config,
    JSON.stringify({ attach: { stores: { local: { type: 'local', serve: 'x-accel-redirect', 'serve-location': '/_attach/local/' } } } }),
  )
  let ours: Awaited<ReturnType<typeof startReference>> | undefined
  let nginx: FrontServer | undefined
  try {
    ours = await startReference(ctx.work, 100 * MiB, 'hono-app', 'attach-storage (signed views)', {
      ATTACH_CONFIG: config,
      ATTACH_SIGNING_SECRET: SIGNING,
    })
    const up = await uploadMultipart(
      `${ours.base}/api/storage/attach/tmp`,
      { refDomain: 'demo', refCategory: 'private' },
      [{ field: 'fileMap', path: file }],
      { authorization: `Bearer ${ours.bearer}` },
    )
    if (up.status !== 200) throw new Error(`temporary upload: ${up.status} ${up.body?.toString().slice(0, 300)}`)
    const item = JSON.parse(up.body!.toString()).files[0]
    const saved = await jsonCall(
      `${ours.base}/api/storage/attach/demo/signed1`,
      'POST',
      { private: [{ savedName: item.name, displayName: 'photo.jpg' }] },
      ours.bearer,
    )
    const id = saved.attachList.at(-1).id as number
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
    const lat = (x: WrkMeasured) => `p50 ${x.latencyP50ms.toFixed(1)} ms, p99 ${x.latencyP99ms.toFixed(1)} ms`
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
  } finally {
    await nginx?.stop()
    await ours?.stop()
    await rm(dir, { recursive: true, force: true })
  }
}
