"""The meshes an arm runs on, one per clock (``clocks``, the table of them), all built from
``config`` (``MeshConfig`` and the services' settings an arm's mesh runs with).

- ``virtual``: every service's core in one process on a virtual clock;
- ``live``: every service a ``grpc.aio`` server in this process, in wall time;
- ``processes``: every service its own process, as ``dynbranch up`` starts them;
- ``real_engines``: engine agents over a real engine on the tiny model (live clock only);
- ``engine_load``: what the engines of a mesh felt while a schedule ran;
- ``echo_server``: a bare gRPC echo server, the floor of one loopback hop (``bench overhead``).
"""
