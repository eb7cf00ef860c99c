class Inventory:
    """A shop's stock: item name -> quantity and unit price."""

    def __init__(self):
        self._items = {}  # name -> [quantity, unit_price]

    def add(self, name, quantity, unit_price):
        raise NotImplementedError

    def remove(self, name, quantity):
        raise NotImplementedError

    def quantity(self, name):
        raise NotImplementedError

    def total_value(self):
        raise NotImplementedError

    def names(self):
        raise NotImplementedError
