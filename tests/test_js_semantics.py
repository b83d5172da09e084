"""JavaScript's semantics the framework's sentences and hashes depend on (footprint_site.lib.js).

Every expected value was printed by Node 20 for the same JSON value.
"""

import json

import pytest

from footprint_site.lib.js import js_equal, js_has_property, js_number, js_string, js_stringify


@pytest.mark.parametrize(
    ("number", "printed"),
    [
        (0, "0"),
        (-0.0, "0"),
        (1, "1"),
        (-1.5, "-1.5"),
        (1e21, "1e+21"),
        (1e20, "100000000000000000000"),
        (123456789012345680000, "123456789012345680000"),
        (1e-7, "1e-7"),
        (1.5e-7, "1.5e-7"),
        (0.000001, "0.000001"),
        (2**53, "9007199254740992"),
        (2**53 + 2, "9007199254740994"),
        (-1e-300, "-1e-300"),
        (5e-324, "5e-324"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (0.1, "0.1"),
        (1e2, "100"),
        (10**400, "Infinity"),  # an integer literal beyond the doubles: JSON.parse reads Infinity
    ],
)
def test_numbers_print_as_number_to_string(number, printed):
    assert js_number(number) == printed


def test_stringify_orders_array_index_keys_first_and_escapes_as_javascript():
    value = json.loads('{"b":[1e21,"x\\u2028\\ud800"],"2":null,"10":{"01":1,"1":2},"a":true}')
    assert js_stringify(value) == '{"2":null,"10":{"1":2,"01":1},"b":[1e+21,"x\u2028\\ud800"],"a":true}'


def test_string_of_an_array_joins_and_prints_nulls_as_nothing():
    assert js_string([1, [2, [3, None]], None, {}]) == "1,2,3,,,[object Object]"


@pytest.mark.parametrize(
    ("container", "name", "found"),
    [
        ({"a": 1}, "a", True),
        ({"a": 1}, "b", False),
        ({}, "toString", True),  # inherited from Object.prototype
        ({}, "__proto__", True),
        ([], "dataset", False),
        ([], "length", True),
        (["x"], "0", True),
        (["x"], "1", False),
        (["x"], "00", False),
        ([], "map", True),
    ],
)
def test_in_finds_own_entries_and_the_prototypes_names(container, name, found):
    assert js_has_property(container, name) is found


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        (1.2345678901234568e18, 1234567890123456800, True),  # jsonb's digits for the double
        (1, 1.0, True),
        (9007199254740993, 9007199254740992, False),  # two integers: exactly, as the bytes say
        ({"a": [1, True]}, {"a": [1.0, True]}, True),
        (True, 1, False),
        (0, False, False),
        ({"a": 1}, {"b": 1}, False),
        ([1, 2], [2, 1], False),
        ("1", 1, False),
    ],
)
def test_js_equal_compares_json_values_as_javascript_reads_them(a, b, equal):
    assert js_equal(a, b) is equal
    assert js_equal(b, a) is equal
