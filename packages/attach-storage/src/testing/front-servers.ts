/**
 * Test-only: the servers a host puts in front of this one, from Debian's packages (installed by the
 * test set-up), each on 127.0.0.1 and a free port with a generated configuration, the way
 * docs/serving.md tells a host to write it: nginx (`X-Accel-Redirect` from internal locations) and
 * lighttpd (`X-Sendfile` from a proxy back end).
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { createServer as createHttpServer } from 'node:http'
import { connect, createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createNodeHandler, type NodeBridgeOptions } from '../node/index.js'

export const NGINX = '/usr/sbin/nginx'
export const LIGHTTPD = '/usr/sbin/lighttpd'

/** A front server started by a test. */
export interface FrontServer {
  /** `http://127.0.0.1:<port>` */
  url: string
  /** The generated configuration (for a failing test's message). */
  config: string
  stop(): Promise<void>
}

/** Runs `binary` with its generated configuration in a temp directory until it accepts on `port`. */
export async function runFront(
  binary: string,
  hint: string,
  write: (dir: string, port: number) => { config: string; file: string; args: string[]; log: string },
): Promise<FrontServer> {
  if (!existsSync(binary)) throw new Error(`${binary} is missing: ${hint} (the test set-up installs it)`)
  const dir = await mkdtemp(join(tmpdir(), 'attach-front-'))
  const port = await freePort()
  const { config, file, args, log } = write(dir, port)
  await writeFile(file, config)
  const child: ChildProcess = spawn(binary, args, { stdio: ['ignore', 'ignore', 'pipe'] })
  let stderr = ''
  child.stderr?.on('data', (d) => {
    stderr += String(d)
  })
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
  const deadline = Date.now() + 10_000
  while (!(await accepts(port))) {
    if (child.exitCode !== null || Date.now() > deadline) {
      const text = await readFile(log, 'utf8').catch(() => '')
      child.kill('SIGKILL')
      await rm(dir, { recursive: true, force: true })
      throw new Error(`${binary} did not start: ${stderr} ${text}`)
    }
    await new Promise((r) => setTimeout(r, 50))
  }
  return {
    url: `http://127.0.0.1:${port}`,
    config,
    async stop() {
      if (child.exitCode === null) {
        child.kill('SIGTERM')
        const timer = setTimeout(() => child.kill('SIGKILL'), 5_000)
        await exited
        clearTimeout(timer)
      }
      await rm(dir, { recursive: true, force: true })
    },
  }
}

/** A port free now on 127.0.0.1. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer()
    s.once('error', reject)
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number }
      s.close(() => resolve(port))
    })
  })
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const c = connect(port, '127.0.0.1')
    c.once('connect', () => {
      c.destroy()
      resolve(true)
    })
    c.once('error', () => resolve(false))
  })
}

/**
 * The start of a test nginx's configuration in `dir`: the process settings and the temporary paths, up
 * to and inside an open `http {` block, which the caller goes on with and closes.
 */
export function nginxHead(dir: string, workers = 1): string {
  return `${process.getuid?.() === 0 ? 'user root;\n' : ''}daemon off;
worker_processes ${workers};
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 256; }
http {
  access_log off;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  default_type application/octet-stream;
`
}

/**
 * Starts nginx proxying `prefixes` to `upstreamPort` and serving each `internal` location (an
 * `X-Accel-Redirect` target, e.g. `/_attach/local/`) from its directory, and each `public` location
 * (the benchmark's ceiling: nginx alone) from its directory. One worker unless told otherwise.
 */
export function startNginx(options: {
  upstreamPort: number
  prefixes: string[]
  internal: Record<string, string>
  public?: Record<string, string>
  workers?: number
}): Promise<FrontServer> {
  const proxied = options.prefixes
    .map(
      (p) => `    location ${p}/ {
      proxy_pass http://attach_storage;
      proxy_set_header Host $host;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      client_max_body_size 64m;
    }`,
    )
    .join('\n')
  const internal = Object.entries(options.internal)
    .map(
      ([location, root]) => `    location ${location} {
      internal;
      alias ${root.endsWith('/') ? root : `${root}/`};
      add_header X-Content-Type-Options nosniff always;
      add_header Content-Security-Policy $upstream_http_content_security_policy always;
    }`,
    )
    .join('\n')
  const open = Object.entries(options.public ?? {})
    .map(([location, root]) => `    location ${location} { alias ${root.endsWith('/') ? root : `${root}/`}; }`)
    .join('\n')
  return runFront(NGINX, 'apt-get install nginx-light', (dir, port) => ({
    file: join(dir, 'nginx.conf'),
    log: join(dir, 'error.log'),
    args: ['-p', dir, '-c', join(dir, 'nginx.conf'), '-e', join(dir, 'error.log')],
    config: `${nginxHead(dir, options.workers)}  upstream attach_storage {
    server 127.0.0.1:${options.upstreamPort};
    keepalive 32;
  }
  server {
    listen 127.0.0.1:${port};
${proxied}
${internal}
${open}
  }
}
`,
  }))
}

/** Starts lighttpd proxying everything to `upstreamPort`, sending `X-Sendfile` files from under `docroots` only. */
export function startLighttpd(options: { upstreamPort: number; docroots: string[] }): Promise<FrontServer> {
  const roots = options.docroots.map((d) => JSON.stringify(d)).join(', ')
  return runFront(LIGHTTPD, 'apt-get install lighttpd', (dir, port) => ({
    file: join(dir, 'lighttpd.conf'),
    log: join(dir, 'error.log'),
    args: ['-D', '-f', join(dir, 'lighttpd.conf')],
    config: `server.document-root = "${dir}"
server.bind = "127.0.0.1"
server.port = ${port}
server.errorlog = "${dir}/error.log"
server.modules = ( "mod_proxy" )
proxy.server = ( "" => (( "host" => "127.0.0.1", "port" => ${options.upstreamPort}, "x-sendfile" => "enable", "x-sendfile-docroot" => ( ${roots} ) )) )
`,
  }))
}

/** A handler served by `node:http` through the Node bridge on 127.0.0.1 and a free port (the upstream of a front server). */
export interface NodeUpstream {
  port: number
  url: string
  /** Connections accepted so far (a front server that keeps its connections open reuses a few). */
  connections(): number
  stop(): Promise<void>
}

/** Serves `fetch` through `createNodeHandler` (with `options`, e.g. the fast path) until `stop()`. */
export async function serveOnNode(fetch: (request: Request) => Promise<Response>, options: NodeBridgeOptions = {}): Promise<NodeUpstream> {
  const server = createHttpServer(createNodeHandler(fetch, options))
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()))
  const { port } = server.address() as { port: number }
  let accepted = 0
  server.on('connection', () => {
    accepted++
  })
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    connections: () => accepted,
    stop: async () => {
      server.closeAllConnections()
      await new Promise<void>((r) => server.close(() => r()))
    },
  }
}
