/**
 * Test-only: nginx in front of this server deciding guarded views by signed URL once per URL
 * (`auth_request` to the decision route, its answer kept in `proxy_cache` keyed by the URL for at most
 * `X-Accel-Expires` seconds), the server block docs/serving.md gives ("Signed views decided once").
 */
import { join } from 'node:path'
import { type FrontServer, NGINX, nginxHead, runFront } from './front-servers.js'

export interface SignedNginxOptions {
  upstreamPort: number
  /** The binary group's prefix, e.g. `/assets/storage`. */
  assetsPrefix: string
  /** The JSON group's prefix, e.g. `/api/storage`. */
  apiPrefix: string
  /** The local store's base directory and its `serve-location` (e.g. `/_attach/local/`). */
  store: { location: string; baseDir: string }
  /** How long nginx keeps an allowing decision at most, in seconds (the decision route's bound). */
  boundSeconds: number
  /** A location nginx serves alone from a directory (the benchmark's ceiling). */
  public?: { location: string; root: string }
  /** More of the server block (the benchmark's `secure_link` location). */
  extra?: string
  workers?: number
}

const slash = (d: string) => (d.endsWith('/') ? d : `${d}/`)

/** The `http`-level lines and the `server` block's locations, as docs/serving.md gives them. */
export function signedViewsConfig(o: SignedNginxOptions, cacheDir: string): { http: string; server: string } {
  const a = o.assetsPrefix
  const http = `  proxy_cache_path ${cacheDir} levels=1:2 keys_zone=attach_decisions:10m max_size=64m inactive=10m use_temp_path=off;
  # The decision route's address for a signed view URL (the path's id and the whole query).
  map $request_uri $attach_decide_uri {
    default ${a}/attach-decide/view/0;
    "~^${a}/attach/view/(\\d{1,15})\\?(.*)$" ${a}/attach-decide/view/$1?$2;
  }
  # The decided file's path below the store's directory (its serve-location taken off).
  map $attach_file $attach_key {
    default "";
    "~^${o.store.location}(.+)$" /$1;
  }`
  const proxied = `      proxy_pass http://attach_storage;
      proxy_set_header Host $host;
      proxy_http_version 1.1;
      proxy_set_header Connection "";`
  const server = `    location ${o.apiPrefix}/ {
${proxied}
      client_max_body_size 64m;
    }
    location ${a}/ {
${proxied}
    }
    # Only nginx asks the decision route.
    location ${a}/attach-decide/ { return 404; }
    # A view by id with a signature: decided once per URL, then sent by nginx.
    location ~ "^${a}/attach/view/\\d{1,15}$" {
      error_page 418 = @attach_node;
      if ($arg_sig = "") { return 418; }
      # Refused or not decided here (a resize, a public file): the view route answers as always.
      error_page 403 = @attach_node;
      auth_request /_attach/decide;
      auth_request_set $attach_file $upstream_http_x_attach_file;
      auth_request_set $attach_type $upstream_http_x_attach_content_type;
      auth_request_set $attach_disposition $upstream_http_x_attach_disposition;
      auth_request_set $attach_cache $upstream_http_x_attach_cache_control;
      auth_request_set $attach_csp $upstream_http_x_attach_csp;
      # The file, from the store's directory, with the headers the server decided.
      root ${slash(o.store.baseDir)};
      types { }
      default_type "";
      add_header Content-Type $attach_type;
      add_header Content-Disposition $attach_disposition;
      add_header Cache-Control $attach_cache;
      add_header X-Content-Type-Options nosniff;
      add_header Content-Security-Policy $attach_csp;
      try_files $attach_key =404;
    }
    location @attach_node {
${proxied}
    }
    location = /_attach/decide {
      internal;
      proxy_pass http://attach_storage$attach_decide_uri;
      # The decision is the URL's alone: no cookie or token is shown to it, and it is kept by the URL.
      proxy_pass_request_headers off;
      proxy_pass_request_body off;
      proxy_set_header Content-Length "";
      proxy_set_header Host $host;
      proxy_set_header X-Attach-Cache-Bound ${o.boundSeconds};
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_cache attach_decisions;
      proxy_cache_key $request_uri;
      proxy_cache_lock on;
    }
    # The store's files for the plain hand-off (X-Accel-Redirect), as before.
    location ${o.store.location} {
      internal;
      alias ${slash(o.store.baseDir)};
      add_header X-Content-Type-Options nosniff always;
      add_header Content-Security-Policy $upstream_http_content_security_policy always;
    }`
  return { http, server }
}

/** Starts nginx with {@link signedViewsConfig} on 127.0.0.1 and a free port. */
export function startSignedNginx(o: SignedNginxOptions): Promise<FrontServer> {
  return runFront(NGINX, 'apt-get install nginx-light', (dir, port) => {
    const { http, server } = signedViewsConfig(o, join(dir, 'decisions'))
    const open = o.public ? `    location ${o.public.location} { alias ${slash(o.public.root)}; }\n` : ''
    return {
      file: join(dir, 'nginx.conf'),
      log: join(dir, 'error.log'),
      args: ['-p', dir, '-c', join(dir, 'nginx.conf'), '-e', join(dir, 'error.log')],
      config: `${nginxHead(dir, o.workers)}${http}
  upstream attach_storage {
    server 127.0.0.1:${o.upstreamPort};
    keepalive 32;
  }
  server {
    listen 127.0.0.1:${port};
${server}
${open}${o.extra ?? ''}  }
}
`,
    }
  })
}
