import pytest

from pages import page_count, paginate

ITEMS = [1, 2, 3, 4, 5]


def test_pages_in_order():
    assert paginate(ITEMS, 1, 2) == [1, 2]
    assert paginate(ITEMS, 2, 2) == [3, 4]
    assert paginate(ITEMS, 3, 2) == [5]
    assert paginate(ITEMS, 4, 2) == []


def test_one_big_page():
    assert paginate(ITEMS, 1, 10) == ITEMS


def test_page_count():
    assert page_count(5, 2) == 3
    assert page_count(4, 2) == 2
    assert page_count(0, 3) == 0
    assert page_count(1, 100) == 1


def test_every_page_together_is_everything():
    pages = [paginate(ITEMS, p, 2) for p in range(1, page_count(len(ITEMS), 2) + 1)]
    assert [x for page in pages for x in page] == ITEMS


@pytest.mark.parametrize("page, per_page", [(0, 2), (1, 0), (-1, 5)])
def test_bad_arguments(page, per_page):
    with pytest.raises(ValueError):
        paginate(ITEMS, page, per_page)
