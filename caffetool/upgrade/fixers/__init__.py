"""caffetool's fissix fixers: each ``fix_<name>`` module holds one ``Fix<Name>`` class, as fissix
loads them (:data:`caffetool.upgrade.python2.FIXERS`)."""
