"""Module credit (issue 57, item 3): which module of a multi-module program received the advantage
mass, how much signal its groups carried, how its local reward tracks the final reward, and how much
its outputs changed between two steps. The definitions are in `webapp.runs.credit.selectors`."""
