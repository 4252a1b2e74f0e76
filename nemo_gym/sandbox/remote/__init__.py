"""Remote sandbox providers: sandboxes on a service reached over its official SDK.

`common` holds what they share (labels, the service's timeout, caps, retries, orphan
reaping, the warm pool, output caps); each provider module (`e2b`, `daytona`,
`opensandbox`, `kubernetes`, `ecs`) is one `RemoteBackend` on it.
Provider modules import their SDK only when a sandbox is first made.
"""
