def _check(page, per_page):
    if page < 1 or per_page < 1:
        raise ValueError("page and per_page start at 1")


def paginate(items, page, per_page):
    """The items on page `page` (numbered from 1), `per_page` to a page."""
    _check(page, per_page)
    start = (page - 1) * per_page
    return items[start:start + per_page]


def page_count(total, per_page):
    """How many pages `total` items fill."""
    _check(1, per_page)
    return (total + per_page - 1) // per_page
