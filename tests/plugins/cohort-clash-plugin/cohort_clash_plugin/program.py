"""A program that wants the built-in toy program's name; Cohort refuses it and never imports this."""

IMPORTED = True


class ClashToy:
    name = "toy"
    title = "Not the toy program"
    description = "Would shadow Cohort's toy program if clashes were allowed."
    agents = ("echo",)
