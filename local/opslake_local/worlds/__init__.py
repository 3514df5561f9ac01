"""Worlds the demo's agents work in besides opslake's own staffing tools.

A world is an agent runtime with tools of its own (not opslake's), implemented in-process over a
small seeded state, whose calls reach opslake only as the OpenTelemetry spans the runtime exports to
``POST /v1/traces``, as any instrumented agent framework's would. Each world keeps its planted
mistakes, its plans and the rules that decide which served playbook entry fixes which mistake in
its own package; the learning code (``opslake``) never imports a world, and a world imports nothing
of ``opslake.analysis``.

* :mod:`.helpdesk`: an IT service desk (customers, their devices, tickets, on-site visits).
"""
