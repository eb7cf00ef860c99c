class Inventory:
    """A shop's stock: item name -> quantity and unit price."""

    def __init__(self):
        self._items = {}  # name -> [quantity, unit_price]

    def add(self, name, quantity, unit_price):
        if quantity < 1 or unit_price < 0:
            raise ValueError("bad quantity or price")
        held = self._items.get(name, [0, unit_price])[0]
        self._items[name] = [held + quantity, unit_price]

    def remove(self, name, quantity):
        if name not in self._items:
            raise KeyError(name)
        held = self._items[name][0]
        if quantity > held:
            raise ValueError("not enough in stock")
        if quantity == held:
            del self._items[name]
        else:
            self._items[name][0] = held - quantity

    def quantity(self, name):
        return self._items.get(name, [0, 0])[0]

    def total_value(self):
        return sum(q * p for q, p in self._items.values())

    def names(self):
        return sorted(self._items)
