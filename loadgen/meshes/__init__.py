"""The meshes an arm runs on, one per clock (``clocks``, the table of them).

- ``virtual``: every service's core in one process on a virtual clock;
- ``processes``: every service its own process, as ``dynbranch up`` starts them;
- the live mesh of gRPC servers in this process is ``loadgen.arms.runner.in_process_mesh``;
- ``real_engines``: engine agents over a real engine on the tiny model (live clock only);
- ``engine_load``: what the engines of a mesh felt while a schedule ran;
- ``echo_server``: a bare gRPC echo server, the floor of one loopback hop (``bench overhead``).
"""
