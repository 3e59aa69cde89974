"""What an entry depends on (``entries``): a tenant's read depends on its own record and the
shared one, a shared stage's only on the shared one; a name key carries its tenant."""

from __future__ import annotations

from services.common.values.reuse_name import name_key
from services.csl.entries import record_keys, tenant_of_key
from tests.csl.factories import name


def test_a_tenants_read_depends_on_its_own_and_the_shared_record() -> None:
    assert record_keys("acme", "doc/1") == (("acme", "doc/1"), ("", "doc/1"))
    assert record_keys("", "doc/1") == (("", "doc/1"),)


def test_a_name_key_carries_its_tenant() -> None:
    assert tenant_of_key(name_key(name(1, tenant="acme"))) == "acme"
    assert tenant_of_key(name_key(name(1, shared=True))) == ""
