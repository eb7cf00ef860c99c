import pytest

from inventory import Inventory


def test_add_and_quantity():
    inv = Inventory()
    inv.add("apple", 3, 0.5)
    inv.add("pear", 2, 0.75)
    inv.add("apple", 2, 0.6)
    assert inv.quantity("apple") == 5
    assert inv.quantity("pear") == 2
    assert inv.quantity("kiwi") == 0
    assert inv.names() == ["apple", "pear"]


def test_total_value_uses_latest_price():
    inv = Inventory()
    inv.add("apple", 3, 0.5)
    inv.add("apple", 1, 1.0)
    inv.add("pear", 2, 0.25)
    assert inv.total_value() == pytest.approx(4.5)


def test_remove():
    inv = Inventory()
    inv.add("apple", 3, 0.5)
    inv.remove("apple", 1)
    assert inv.quantity("apple") == 2
    inv.remove("apple", 2)
    assert inv.quantity("apple") == 0
    assert inv.names() == []


def test_remove_errors():
    inv = Inventory()
    inv.add("apple", 3, 0.5)
    with pytest.raises(KeyError):
        inv.remove("kiwi", 1)
    with pytest.raises(ValueError):
        inv.remove("apple", 4)
    assert inv.quantity("apple") == 3


@pytest.mark.parametrize("quantity, price", [(0, 1.0), (-2, 1.0), (1, -0.5)])
def test_add_errors(quantity, price):
    inv = Inventory()
    with pytest.raises(ValueError):
        inv.add("apple", quantity, price)
    assert inv.names() == []


def test_empty_inventory():
    assert Inventory().total_value() == 0
