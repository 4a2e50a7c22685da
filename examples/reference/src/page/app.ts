/**
 * The board page's script (served bundled as /page/app.js): signs in (a development token when the server
 * hands one out, else a token the user pastes), posts the `#new-post` form with its attachments, lists
 * the posts with paging, and shows, edits and deletes one post. Routes are the URL's hash: `#/`,
 * `#/?page=N`, `#/post/{id}`.
 *
 * Pictures: each shows its ThumbHash placeholder until it has loaded, carries width and height from the
 * record's `media` (the layout does not jump), and a `srcset` of the category's named variants once they
 * are made. A post opens with a cover crop of its first picture; clicking a picture in the edit view sets
 * its focus (PUT), which cover crops keep in.
 *
 * PDFs and videos: once the server has made a preview image of one (`preview: 'made'`), the post shows it
 * (a srcset of `?w=` resizes of it, which the board's `default` category allows: it lists no `sizes`)
 * with a badge of the video's length or the PDF's pages; clicking plays the video in place or opens the
 * PDF. While a preview is being made the post shows a neutral box with the kind of file, and looks
 * its attachments up again a few times until it is made.
 */
import {
  AttachClient,
  type AttachBag,
  type AttachContainer,
  type AttachmentView,
  fileKind,
  mediaLabel,
  mergeContainers,
  placeholderDataUrl,
  previewOf,
  srcsetOf,
} from '@attach-storage/client'
import { AttachField, defineAttachField } from '@attach-storage/client/element'

interface Post {
  id: number
  title: string
  body: string
  createdBy: number | string | null
  createdDt: string
  attachContainer?: AttachBag
}

const PER_PAGE = 10
const $ = <T extends HTMLElement>(sel: string, root: ParentNode = document) => root.querySelector(sel) as T
function h<K extends keyof HTMLElementTagNameMap>(tag: K, props: Record<string, unknown> = {}, ...children: (Node | string)[]) {
  const el: HTMLElementTagNameMap[K] = Object.assign(document.createElement(tag), props)
  el.append(...children)
  return el
}

let token = sessionStorage.getItem('attach-token') ?? ''
const client = new AttachClient({ token: () => token })
AttachField.defaultClient = client
defineAttachField()

async function api<T>(method: string, path: string, body?: unknown): Promise<{ data: T; headers: Headers }> {
  const res = await fetch(path, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  const text = await res.text()
  const data = text ? JSON.parse(text) : null
  if (!res.ok) throw Object.assign(new Error(data?.message ?? `HTTP ${res.status}`), { code: data?.code, status: res.status })
  return { data, headers: res.headers }
}

/** Signs in: the development token when the server gives one, else the pasted one. */
async function signIn(): Promise<boolean> {
  const auth = $('#auth')
  const res = await fetch('/page/dev-token')
  if (res.ok) {
    token = ((await res.json()) as { token: string }).token
    auth.replaceChildren(
      h('span', { className: 'dev' }, 'Signed in as user 1 with a development token: ATTACH_JWT_SECRET is the development secret'),
    )
    return true
  }
  const input = h('input', { type: 'password', placeholder: 'Bearer token (a JWT)', value: token })
  input.setAttribute('aria-label', 'Bearer token')
  const form = h('form', { className: 'row' }, input, h('button', { type: 'submit' }, 'Sign in'))
  form.addEventListener('submit', (e) => {
    e.preventDefault()
    token = input.value.trim()
    sessionStorage.setItem('attach-token', token)
    void route()
  })
  auth.replaceChildren(form)
  if (!token)
    $('#post-list').replaceChildren(h('li', {}, 'Sign in with a token signed with the server’s ATTACH_JWT_SECRET to see the posts.'))
  return token !== ''
}

const fields = (root: ParentNode) => [...root.querySelectorAll<AttachField>('attach-field')]

/** The merged attachContainer of a form's fields, or an error to show. */
function containerOf(root: ParentNode): AttachContainer | string {
  const all = fields(root)
  if (all.some((f) => f.busy)) return 'Wait until every upload has finished'
  if (all.some((f) => f.hasErrors)) return 'Remove or retry the files marked with an error first'
  return mergeContainers(all.map((f) => JSON.parse(f.value) as AttachContainer))!
}

function statusText(el: HTMLElement, text: string, error = false) {
  el.textContent = text
  el.classList.toggle('error', error)
}

async function submitNew(e: SubmitEvent) {
  e.preventDefault()
  const form = e.target as HTMLFormElement
  const status = $('#form-status')
  const data = new FormData(form)
  const attachContainer = containerOf(form)
  if (typeof attachContainer === 'string') return statusText(status, attachContainer, true)
  statusText(status, 'Publishing…')
  try {
    const { data: post } = await api<Post>('POST', '/board', {
      title: data.get('title'),
      body: data.get('body'),
      attachContainer,
    })
    form.reset()
    for (const f of fields(form)) f.setSaved([])
    statusText(status, `Published “${post.title}”`)
    location.hash = `#/post/${post.id}`
  } catch (err) {
    statusText(status, (err as Error).message, true)
  }
}

/** A picture the browser can show once the server has converted it (HEIC answers JPEG on views and resizes). */
const isPicture = (r: AttachmentView) => r.fileType.startsWith('image/')

type Box = { w: number; h: number }

/** A resized view's address: inside the box, or the exact box cropped around the record's focus (`cover`). */
function resizedUrl(r: AttachmentView, box: Box, cover = false): string {
  const url = client.viewUrl(r.id, box)
  if (!cover) return url
  // `v` only keys the browser's cache: a changed focus makes a new crop at the same server address.
  const focus = r.focus ? `&v=${r.focus.x},${r.focus.y}` : ''
  return `${url}&fit=cover${focus}`
}

/** The size a picture of the record's `media` takes inside `box` (never larger), for width and height attributes. */
function fitted(r: AttachmentView, box: Box): Box | undefined {
  const m = r.media && 'width' in r.media ? r.media : undefined
  if (!m?.width || !m.height) return undefined
  const scale = Math.min(1, box.w / m.width, box.h / m.height)
  return { w: Math.max(1, Math.round(m.width * scale)), h: Math.max(1, Math.round(m.height * scale)) }
}

/**
 * An `<img>` of a picture record: the resized `src`, width and height (the box for a cover crop, else the
 * picture fitted into it), the ThumbHash placeholder as its background until the file has loaded
 * (class `placeholder`), and with `sizes` a srcset of the named variants (only once at least two of them
 * are made: a lone candidate would be the original).
 */
function picture(r: AttachmentView, box: Box, options: { cover?: boolean; sizes?: string } = {}): HTMLImageElement {
  const img = h('img', { alt: r.displayName, title: r.displayName, decoding: 'async' })
  const size = options.cover ? box : fitted(r, box)
  if (size) {
    img.width = size.w
    img.height = size.h
  }
  const placeholder = placeholderDataUrl(r)
  if (placeholder) {
    img.classList.add('placeholder')
    img.style.backgroundImage = `url("${placeholder}")`
    if (options.cover && r.focus) img.style.backgroundPosition = `${r.focus.x * 100}% ${r.focus.y * 100}%`
    img.addEventListener(
      'load',
      () => {
        img.classList.remove('placeholder')
        img.style.backgroundImage = ''
      },
      { once: true },
    )
  }
  const srcset = options.sizes ? srcsetOf(r) : ''
  if (srcset.includes(',')) {
    img.sizes = options.sizes!
    img.srcset = srcset
  }
  img.src = resizedUrl(r, box, options.cover)
  return img
}

/** A PDF or a video whose preview image is made or being made: shown as a picture of it. */
const isPreviewed = (r: AttachmentView) => previewOf(r).state !== 'none'

/**
 * The `srcset` of a preview image: `?w=` resizes of it at 320 and 640 pixels (narrower than the preview
 * when a video's frame size is known: a resize never enlarges) and the preview itself, at its width
 * (a video's frame fitted into 1024 pixels, `previews.max-side`'s default; 1024 for a PDF, whose page
 * size the record does not give).
 */
function previewSrcset(r: AttachmentView, preview: string): string {
  const m = r.media && 'width' in r.media && r.media.width > 0 && r.media.height > 0 ? r.media : undefined
  const full = m ? Math.round(m.width * Math.min(1, 1024 / Math.max(m.width, m.height))) : 1024
  return [
    ...[320, 640].filter((w) => w < full).map((w) => `${client.viewUrl(r.id, { w })} ${w}w`),
    `${preview.replace(/,/g, '%2C')} ${full}w`,
  ].join(', ')
}

/**
 * A PDF's or a video's tile: its preview image (width and height from a video's `media`) with a badge
 * of its length or pages, which plays the video in place or opens the PDF; while the preview is being
 * made, a neutral box naming the kind of file.
 */
function previewTile(r: AttachmentView): HTMLElement {
  const kind = fileKind(r)
  const label = mediaLabel(r)
  const shown = previewOf(r)
  const frame = h('span', { className: `preview ${kind}` })
  if (shown.state === 'made') {
    const img = h('img', { alt: r.displayName, decoding: 'async' })
    const size = fitted(r, { w: 640, h: 640 })
    if (size) {
      img.width = size.w
      img.height = size.h
    }
    img.sizes = '(max-width: 600px) 100vw, 270px'
    img.srcset = previewSrcset(r, shown.url)
    img.src = shown.url
    // A resize that does not load (a bound of the server's): the preview itself.
    img.addEventListener('error', () => {
      if (!img.srcset) return
      img.removeAttribute('srcset')
      img.src = shown.url
    })
    frame.append(img)
  } else {
    frame.classList.add('pending')
    frame.append(
      h('span', { className: 'kind' }, kind === 'pdf' ? 'PDF' : 'VIDEO'),
      h('span', { className: 'wait' }, 'Preview being made…'),
    )
  }
  if (label) frame.append(h('span', { className: 'badge' }, label))
  const view = client.viewUrl(r.id)
  const described = `${r.displayName}${label ? ` (${label})` : ''}`
  if (kind !== 'video') {
    const a = h('a', { href: view, target: '_blank', className: 'open' }, frame)
    a.setAttribute('aria-label', `Open ${described}`)
    return a
  }
  const play = h('button', { type: 'button', className: 'play' }, frame)
  play.setAttribute('aria-label', `Play ${described}`)
  play.addEventListener('click', () => {
    const video = h('video', { controls: true, autoplay: true, preload: 'metadata', src: view })
    if (shown.state === 'made') video.poster = shown.url
    const m = r.media && 'width' in r.media ? r.media : undefined
    if (m?.width) {
      video.width = m.width
      video.height = m.height
    }
    play.replaceWith(video)
    video.focus()
  })
  return play
}

const attachmentsOf = (bag: AttachBag | undefined): AttachmentView[] =>
  Object.entries(bag ?? {})
    .filter(([k, v]) => k !== 'refDomain' && Array.isArray(v))
    .flatMap(([, v]) => v as AttachmentView[])

async function showBoard(page: number) {
  $('#post-view').hidden = true
  $('#board-view').hidden = false
  const list = $('#post-list')
  const { data: posts, headers } = await api<Post[]>(
    'GET',
    `/board?_usePaging=true&currentPage=${page}&dataPerPage=${PER_PAGE}&sortBy=id:desc`,
  )
  const files = new Map<string, AttachmentView[]>()
  if (posts.length) {
    const { data } = await api<AttachmentView[]>(
      'GET',
      client.api(`/attach?refDomain=board&refKeyList=${posts.map((p) => p.id).join(',')}`),
    )
    for (const r of data) files.set(r.refKey, [...(files.get(r.refKey) ?? []), r])
  }
  list.replaceChildren(
    ...posts.map((p) => {
      const mine = files.get(String(p.id)) ?? []
      const image = mine.find(isPicture)
      // Without a picture, the first PDF's or video's preview stands for the post.
      const previewed = image ? undefined : mine.find((r) => previewOf(r).state === 'made')
      const thumb = image
        ? picture(image, { w: 128, h: 128 }, { cover: true })
        : previewed
          ? h('img', {
              alt: previewed.displayName,
              src: `${client.viewUrl(previewed.id, { w: 128, h: 128 })}&fit=cover`,
              width: 128,
              height: 128,
            })
          : h('span', { className: 'none' }, 'no image')
      return h(
        'li',
        {},
        thumb,
        h(
          'div',
          {},
          h('a', { href: `#/post/${p.id}` }, p.title),
          h('div', { className: 'meta' }, `#${p.id} · ${new Date(p.createdDt).toLocaleString()} · ${mine.length} attachment(s)`),
        ),
      )
    }),
  )
  if (!posts.length) list.append(h('li', {}, 'No posts yet.'))
  const total = Number(headers.get('x-app-total-count') ?? posts.length)
  const pages = Math.max(1, Math.ceil(total / PER_PAGE))
  $('#pager').replaceChildren(
    ...Array.from({ length: pages }, (_, i) => {
      const a = h('a', { href: `#/?page=${i + 1}` }, String(i + 1))
      if (i + 1 === page) a.setAttribute('aria-current', 'page')
      return a
    }),
  )
}

/**
 * The post's attachments: its pictures first (a gallery, each category in its order), then its PDFs and
 * videos with previews, then its other files.
 */
function attachmentList(post: Post) {
  const ul = h('ul', { className: 'attachments', id: 'attachments' })
  const all = attachmentsOf(post.attachContainer)
  const previewed = all.filter((r) => !isPicture(r) && isPreviewed(r))
  const rest = all.filter((r) => !isPicture(r) && !isPreviewed(r))
  ul.append(...[...all.filter(isPicture), ...previewed, ...rest].map(attachmentItem))
  if (!ul.children.length) ul.append(h('li', {}, 'No attachments.'))
  if (all.some((r) => previewOf(r).state === 'pending')) void refreshPreviews(post, ul)
  return ul
}

/** One attachment of the post: its picture, preview or icon, its name, a download link and what it is. */
function attachmentItem(r: AttachmentView): HTMLLIElement {
  const view = client.viewUrl(r.id)
  const m = r.media && 'width' in r.media && r.media.width ? `${r.media.width}×${r.media.height}` : undefined
  const visual = isPicture(r)
    ? h('a', { href: view, target: '_blank' }, picture(r, { w: 640, h: 640 }, { sizes: '(max-width: 600px) 100vw, 270px' }))
    : isPreviewed(r)
      ? previewTile(r)
      : h('span', { className: 'file' }, (r.displayName.split('.').pop() ?? '').slice(0, 4).toUpperCase() || 'FILE')
  const li = h(
    'li',
    { className: isPicture(r) || isPreviewed(r) ? 'picture' : 'other' },
    visual,
    h('a', { href: view, target: '_blank', className: 'view' }, r.displayName),
    h('a', { href: client.viewUrl(r.id, { download: true }), className: 'download', download: r.displayName }, 'Download'),
    h('span', { className: 'meta' }, [r.refCategory, r.fileType, m, mediaLabel(r)].filter(Boolean).join(' · ')),
  )
  li.dataset.category = r.refCategory
  li.dataset.id = String(r.id)
  if (r.preview) li.dataset.preview = r.preview
  return li
}

/** The waits (ms) before each new lookup of a post whose previews are being made: 5, about 30 s in all. */
const PREVIEW_RETRY_DELAYS = [1000, 2000, 4000, 8000, 16000]

/**
 * Looks the post's attachments up again while one of its previews is being made, and shows each again
 * in its place once its preview is made (or failed); stops when none is pending, the list has left the
 * page, or after the last wait.
 */
async function refreshPreviews(post: Post, shown: HTMLElement) {
  for (const delay of PREVIEW_RETRY_DELAYS) {
    await new Promise((resolve) => setTimeout(resolve, delay))
    if (!shown.isConnected) return
    const looked = await client.lookup('board', post.id)
    if (!shown.isConnected) return
    if (!looked.ok) continue
    post.attachContainer = looked.value
    let waiting = 0
    for (const r of attachmentsOf(looked.value)) {
      const li = shown.querySelector<HTMLLIElement>(`li[data-id="${r.id}"]`)
      if (li?.dataset.preview !== 'pending') continue
      if (r.preview === 'pending') waiting++
      else li.replaceWith(attachmentItem(r))
    }
    if (!waiting) return
  }
}

async function showPost(id: string) {
  $('#board-view').hidden = true
  const view = $('#post-view')
  view.hidden = false
  let post: Post
  try {
    post = (await api<Post>('GET', `/board/${id}`)).data
  } catch (err) {
    view.replaceChildren(h('p', { className: 'error' }, (err as Error).message), h('a', { href: '#/' }, 'Back to the board'))
    return
  }
  const all = attachmentsOf(post.attachContainer)
  const status = h('span', { role: 'status', id: 'post-status' })
  const zip = h('button', { type: 'button', id: 'download-all', disabled: all.length === 0 }, 'Download all (ZIP)')
  zip.addEventListener('click', async () => {
    statusText(status, 'Preparing the ZIP…')
    const r = await client.zip(
      all.map((a) => a.id),
      post.title,
    )
    if (!r.ok) return statusText(status, r.error.message, true)
    const a = h('a', { href: URL.createObjectURL(r.value.blob), download: r.value.fileName })
    document.body.append(a)
    a.click()
    a.remove()
    setTimeout(() => URL.revokeObjectURL(a.href), 10_000)
    statusText(status, `Downloaded ${r.value.fileName}`)
  })
  const edit = h('button', { type: 'button', className: 'secondary', id: 'edit-post' }, 'Edit')
  const del = h('button', { type: 'button', className: 'danger', id: 'delete-post' }, 'Delete')
  del.addEventListener('click', async () => {
    if (!confirm(`Delete “${post.title}” and its attachments?`)) return
    try {
      await api('DELETE', `/board/${post.id}`)
      location.hash = '#/'
    } catch (err) {
      statusText(status, (err as Error).message, true)
    }
  })
  edit.addEventListener('click', () => view.replaceChildren(editForm(post)))
  const first = all.find(isPicture)
  const cover = first ? picture(first, { w: 800, h: 300 }, { cover: true }) : undefined
  cover?.setAttribute('id', 'post-cover')
  view.replaceChildren(
    h('p', {}, h('a', { href: '#/' }, '← Board')),
    ...(cover ? [cover] : []),
    h('h2', { id: 'post-title' }, post.title),
    h('p', { className: 'meta' }, `#${post.id} · by user ${post.createdBy} · ${new Date(post.createdDt).toLocaleString()}`),
    h('p', { className: 'body' }, post.body),
    attachmentList(post),
    h('div', { className: 'row' }, zip, edit, del, status),
  )
}

function editForm(post: Post): HTMLFormElement {
  const title = h('input', { name: 'title', required: true, maxLength: 200, value: post.title })
  const body = h('textarea', { name: 'body', rows: 3, value: post.body })
  const field = (category: string, legend: string) => {
    const f = document.createElement('attach-field') as AttachField
    f.setAttribute('domain', 'board')
    f.setAttribute('category', category)
    f.setAttribute('name', `attach-${category}`)
    f.setAttribute('max-files', '50')
    f.setSaved(((post.attachContainer?.[category] as AttachmentView[] | undefined) ?? []).slice())
    return h('fieldset', {}, h('legend', {}, legend), f)
  }
  const status = h('span', { role: 'status', id: 'edit-status' })
  const cancel = h('button', { type: 'button', className: 'secondary' }, 'Cancel')
  cancel.addEventListener('click', () => void showPost(String(post.id)))
  const form = h(
    'form',
    { id: 'edit-post-form' },
    h('h2', {}, `Edit “${post.title}”`),
    h('label', {}, 'Title ', title),
    h('label', {}, 'Text ', body),
    field('image', 'Images'),
    field('default', 'Files'),
    ...focusPicker(post),
    h('div', { className: 'row' }, h('button', { type: 'submit' }, 'Save'), cancel, status),
  )
  form.addEventListener('submit', async (e) => {
    e.preventDefault()
    const attachContainer = containerOf(form)
    if (typeof attachContainer === 'string') return statusText(status, attachContainer, true)
    try {
      await api('PUT', `/board/${post.id}`, { title: title.value, body: body.value, attachContainer })
      await showPost(String(post.id))
    } catch (err) {
      statusText(status, (err as Error).message, true)
    }
  })
  return form
}

/**
 * The edit view's focus points: each picture of the post, a marker at its focus, and two cover crops made
 * around it. A click on a picture sets the focus there (0..1 from the top left of the picture as shown),
 * saved at once through the JSON group's PUT; the crops then load again.
 */
function focusPicker(post: Post): HTMLElement[] {
  const pictures = attachmentsOf(post.attachContainer).filter(isPicture)
  if (!pictures.length) return []
  const list = h('ul', { id: 'focus-list', className: 'focus-list' })
  for (const r of pictures) {
    const img = picture(r, { w: 400, h: 300 })
    const marker = h('span', { className: 'marker' })
    marker.setAttribute('aria-hidden', 'true')
    const wide = picture(r, { w: 320, h: 120 }, { cover: true })
    wide.classList.add('cover-wide')
    const square = picture(r, { w: 120, h: 120 }, { cover: true })
    square.classList.add('cover-square')
    const status = h('span', { className: 'meta', role: 'status' })
    const show = () => {
      marker.hidden = !r.focus
      if (r.focus) {
        marker.style.left = `${r.focus.x * 100}%`
        marker.style.top = `${r.focus.y * 100}%`
      }
      status.textContent = r.focus
        ? `Focus ${r.focus.x.toFixed(2)}, ${r.focus.y.toFixed(2)}`
        : 'No focus: cover crops keep the busiest region'
    }
    show()
    img.addEventListener('click', async (e) => {
      const box = img.getBoundingClientRect()
      const at = (v: number) => Math.round(Math.min(1, Math.max(0, v)) * 1000) / 1000
      const focus = { x: at((e.clientX - box.left) / box.width), y: at((e.clientY - box.top) / box.height) }
      status.textContent = 'Saving the focus…'
      try {
        await api('PUT', client.api('/attach/'), [{ id: r.id, focus }])
        r.focus = focus
        show()
        wide.src = resizedUrl(r, { w: 320, h: 120 }, true)
        square.src = resizedUrl(r, { w: 120, h: 120 }, true)
      } catch (err) {
        statusText(status, (err as Error).message, true)
      }
    })
    const li = h(
      'li',
      { className: 'focus-item' },
      h('div', { className: 'focus-picture' }, img, marker),
      h('div', { className: 'focus-crops' }, wide, square, status),
    )
    li.dataset.id = String(r.id)
    list.append(li)
  }
  return [
    h(
      'fieldset',
      { className: 'focus' },
      h('legend', {}, 'Focus points'),
      h('p', { className: 'meta' }, 'Click a picture where its subject is: cover crops keep that point in the box (saved at once).'),
      list,
    ),
  ]
}

async function route() {
  if (!token) return
  const hash = location.hash.replace(/^#/, '') || '/'
  const post = /^\/post\/(\d+)$/.exec(hash)
  try {
    if (post) await showPost(post[1]!)
    else await showBoard(Math.max(1, Number(new URLSearchParams(hash.split('?')[1] ?? '').get('page')) || 1))
  } catch (err) {
    $('#post-list').replaceChildren(h('li', { className: 'error' }, (err as Error).message))
  }
}

$<HTMLFormElement>('#new-post').addEventListener('submit', (e) => void submitNew(e as SubmitEvent))
window.addEventListener('hashchange', () => void route())
if (await signIn()) await route()
